"""Linear layers whose weights are pre-packed once into oneDNN's blocked layout, for CPU inference.

``F.linear`` on a dense weight re-packs the weight into the BLAS kernel's tile layout on every call; at decode
batch sizes that packing costs as much as the multiply itself. Packing once at load time (what vLLM's and
IPEX's CPU paths do) measured 1.3-1.9x faster on this project's decode-sized GEMMs (8-256 rows), most of all on
Gemma's 262,144-row LM head. Packing replaces the dense weight, so it costs no extra memory, except for a tied
LM head: the embedding keeps its dense rows for lookups and the head gets its own packed copy.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

logger = logging.getLogger(__name__)

GEMM_BACKENDS = ("auto", "onednn", "torch")


class PackedLinear(nn.Module):
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


def onednn_unavailable_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why packed oneDNN GEMMs cannot run here, or None when they can."""
    if device.type != "cpu":
        return f"device is {device.type}, oneDNN packing is for CPU"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if dtype == torch.float32:
        return None
    if dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    return f"oneDNN has no fast {str(dtype).removeprefix('torch.')} GEMM on this CPU"


def resolve_gemm_backend(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` picks oneDNN where it runs; asking for ``onednn`` where it cannot run is an error."""
    if requested not in GEMM_BACKENDS:
        raise ValueError(f"gemm_backend must be one of {', '.join(GEMM_BACKENDS)}, got {requested!r}")
    if requested == "torch":
        return "torch"
    reason = onednn_unavailable_reason(device, dtype)
    if reason is None:
        return "onednn"
    if requested == "onednn":
        raise ValueError(f"gemm_backend 'onednn' cannot run: {reason}")
    logger.info("GEMMs run through torch's dense linear: %s", reason)
    return "torch"


def pack_linear_layers(model: nn.Module) -> int:
    """Swap every ``nn.Linear`` under ``model`` for a :class:`PackedLinear`; returns how many were packed."""
    targets = [(name, module) for name, module in model.named_modules() if type(module) is nn.Linear]
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, PackedLinear(linear.weight, linear.bias))
    return len(targets)
