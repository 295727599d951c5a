"""GEMM weights pre-packed once at load time, for CPU inference.

``F.linear`` on a dense weight re-packs the weight into the BLAS kernel's tile layout on every call; at decode
batch sizes that packing costs as much as the multiply itself. Packing once at load time (what vLLM's and
IPEX's CPU paths do) measured 1.1-2.7x faster on this project's decode-sized GEMMs (16-64 rows). fp32 weights
go into our panel kernel's layout (``paged::panel_linear``, csrc/cpu/gemm.h): on Gemma 3 270M's shapes it ran
1.2-1.4x oneDNN's packed GEMM at 1-64 rows and 1.0-1.1x at 2048 on Zen 4; on an AMX Xeon 1.2-3x at 1 row,
0.9-1.5x at 16 and 0.77-0.97x at 512-2048. Where our kernels do not load, and for bf16,
oneDNN's packed layout is used. Packing replaces the dense weight, so it costs no extra memory. A tied head in
panels also serves the embedding lookups (``PanelEmbedding``); a tied head oneDNN packs is opaque, so there the
embedding keeps its dense rows. Figures: docs/benchmarks.md#gemm (``benchmarks/bench_gemm.py``).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from paged_engine.kernels import ops

logger = logging.getLogger(__name__)

GEMM_BACKENDS = ("auto", "packed", "torch")


class OneDNNLinear(nn.Module):
    """``y = x @ W.T + b`` with ``W`` held in oneDNN's opaque packed layout."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class PanelLinear(nn.Module):
    """``y = x @ W.T + b`` (fp32) with ``W`` packed into the panel kernel's 16-column panels."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed_weight = ops.pack_linear_weight(weight.detach().contiguous())
        self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = ops.panel_linear(x.reshape(-1, self.in_features), self.packed_weight, self.out_features)
        if self.bias is not None:
            out.add_(self.bias)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class PanelEmbedding(nn.Module):
    """Embedding lookups read from a tied head's panels, so the model holds the ``[vocab, hidden]`` matrix once
    (640 MiB for Gemma 3 270M in fp32). Row ``t`` is column ``t % 16`` of panel ``t // 16``: a strided gather,
    measured at 4.3 ms for a 2048-token prefill chunk (0.3 ms from dense rows) and 0.1 ms for 64 decode tokens."""

    def __init__(self, head: PanelLinear) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features
        self.panels = head.packed_weight

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.panels[token_ids // ops.PANEL_COLS, :, token_ids % ops.PANEL_COLS]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, shared with the LM head"


PACKED_LINEARS = (OneDNNLinear, PanelLinear)


def cpu_kernels_available() -> bool:
    """Whether our CPU kernels load (building them on first use); logs why not."""
    try:
        ops.load()
    except ops.KernelBuildError as exc:
        logger.info("paged CPU kernels unavailable, GEMMs use oneDNN and activations torch: %s", exc)
        return False
    return True


def packed_linear(weight: torch.Tensor, bias: torch.Tensor | None, kernels: bool) -> nn.Module:
    """The panel kernel for fp32 when our CPU kernels are loaded (``kernels``), else oneDNN."""
    if kernels and weight.dtype == torch.float32:
        return PanelLinear(weight, bias)
    return OneDNNLinear(weight, bias)


def packed_unavailable_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why pre-packed GEMMs cannot run here, or None when they can."""
    if device.type != "cpu":
        return f"device is {device.type}, pre-packing is for CPU"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if dtype == torch.float32:
        return None
    if dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    return f"oneDNN has no fast {str(dtype).removeprefix('torch.')} GEMM on this CPU"


def resolve_gemm_backend(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` picks pre-packed weights where they run; asking for ``packed`` where they cannot is an error."""
    if requested not in GEMM_BACKENDS:
        raise ValueError(f"gemm_backend must be one of {', '.join(GEMM_BACKENDS)}, got {requested!r}")
    if requested == "torch":
        return "torch"
    reason = packed_unavailable_reason(device, dtype)
    if reason is None:
        return "packed"
    if requested == "packed":
        raise ValueError(f"gemm_backend 'packed' cannot run: {reason}")
    logger.info("GEMMs run through torch's dense linear: %s", reason)
    return "torch"


def pack_linear_layers(model: nn.Module, kernels: bool) -> int:
    """Swap every ``nn.Linear`` under ``model`` for a :func:`packed_linear`; returns how many were packed."""
    # Names only: each dense weight is freed as soon as its packed copy replaces it, so packing never holds
    # two copies of every layer at once.
    names = [name for name, module in model.named_modules() if type(module) is nn.Linear]
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, attr)
        setattr(parent, attr, packed_linear(linear.weight, linear.bias, kernels))
    return len(names)
