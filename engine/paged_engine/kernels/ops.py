"""The ``paged`` torch ops (C++/CUDA kernels) as Python functions, plus their fake implementations.

``load()`` finds or builds the extension once per process and registers fake (meta) kernels so ``torch.compile``
can trace graphs that call the ops. The ops check their own arguments in C++ (dtype, device, shape, and the
values that decide which memory they touch), so the wrappers here only forward. Which instruction-set variant
each CPU kernel family runs is the C++ side's best at load; choosing among them is ``cpu_isa``'s job.
"""

from __future__ import annotations

import functools
import logging

import torch

from paged_engine.kernels.build import Extension, KernelBuildError, find_or_build
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES

log = logging.getLogger(__name__)

# Activation name (ours, models/layers.py) -> the op computing ``act(gate) * up`` from ``[rows, 2d]``.
GATED_ACTIVATIONS = {"silu": "silu_and_mul", "gelu_tanh": "gelu_tanh_and_mul"}

# Output columns per panel of a weight packed by ``pack_linear_weight`` (csrc/cpu/gemm.h: kPanelCols).
PANEL_COLS = 16

__all__ = [
    "Extension",
    "KernelBuildError",
    "argmax_rows",
    "candidate_panels",
    "copy_blocks",
    "gated_activation",
    "load",
    "loaded",
    "pack_linear_weight",
    "paged_attention",
    "panel_linear",
    "reshape_and_cache",
    "rms_norm",
    "rotary_embedding_",
]


@functools.cache
def load() -> Extension:
    """Load (building on first use) the kernel extension; raises KernelBuildError with the reason if it can't."""
    ext = find_or_build()
    _register_fakes()
    log.info("paged kernels loaded from %s (%s build, CUDA kernels: %s; this CPU: %s)", ext.path, ext.how,
             ext.with_cuda, ", ".join(supported_cpu_isas()))  # fmt: skip
    return ext


def loaded() -> bool:
    """Whether ``load()`` has succeeded in this process; never builds."""
    return load.cache_info().currsize > 0


def _register_fakes() -> None:
    # The ops only mutate their arguments and return nothing, so the fakes compute nothing; they exist so
    # FakeTensor/meta tracing (torch.compile, opcheck) can run the ops. They do check devices: a mix of real and
    # meta tensors dispatches here, and must fail as loudly as the real kernels' device checks.
    @torch.library.register_fake("paged::reshape_and_cache")
    def _(key, value, key_cache, value_cache, slot_mapping) -> None:
        _check_same_device(
            "paged::reshape_and_cache", "key_cache", key_cache, key=key, value=value, slot_mapping=slot_mapping
        )

    @torch.library.register_fake("paged::paged_attention")
    def _(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, window, cap) -> None:
        _check_same_device(
            "paged::paged_attention",
            "query",
            query,
            out=out,
            key_cache=key_cache,
            value_cache=value_cache,
            block_tables=block_tables,
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
        )

    @torch.library.register_fake("paged::copy_blocks")
    def _(key_caches, value_caches, block_mapping) -> None:
        if key_caches:
            caches = {f"caches[{i}]": t for i, t in enumerate([*key_caches, *value_caches])}
            _check_same_device("paged::copy_blocks", "key_caches[0]", key_caches[0], **caches)

    @torch.library.register_fake("paged::pack_linear_weight")
    def _(weight):
        return weight.new_empty((-(-weight.shape[0] // PANEL_COLS), weight.shape[1], PANEL_COLS))

    @torch.library.register_fake("paged::panel_linear")
    def _(input, packed_weight, out_features):
        _check_same_device("paged::panel_linear", "input", input, packed_weight=packed_weight)
        return input.new_empty((input.shape[0], out_features))

    for name in GATED_ACTIVATIONS.values():
        torch.library.register_fake(f"paged::{name}")(_gated_activation_fake(f"paged::{name}"))

    @torch.library.register_fake("paged::argmax_rows")
    def _(input):
        return input.new_empty((input.shape[0],), dtype=torch.int64)

    @torch.library.register_fake("paged::candidate_panels")
    def _(scores, threshold):
        _check_same_device("paged::candidate_panels", "scores", scores, threshold=threshold)
        return scores.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.int64)

    @torch.library.register_fake("paged::rotary_embedding")
    def _(query, key, cos, sin):
        _check_same_device("paged::rotary_embedding", "query", query, key=key, cos=cos, sin=sin)

    @torch.library.register_fake("paged::rms_norm")
    def _(out, input, weight, eps, offset):
        _check_same_device("paged::rms_norm", "input", input, out=out, weight=weight)


def _gated_activation_fake(op: str):
    def fake(out: torch.Tensor, input: torch.Tensor) -> None:
        _check_same_device(op, "input", input, out=out)

    return fake


def _check_same_device(op: str, anchor_name: str, anchor: torch.Tensor, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        if tensor.device != anchor.device:
            raise RuntimeError(f"{op}: {name} is on {tensor.device} but {anchor_name} is on {anchor.device}")


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``key``/``value`` ``[T, kv_heads, d]`` into the caches at ``slot_mapping`` ``[T]`` int64 (−1 skips)."""
    torch.ops.paged.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)


def paged_attention(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int = -1,
    logits_soft_cap: float = 0.0,
) -> None:
    """Causal varlen attention of ``query`` ``[T, heads, d]`` over the paged cache, written into ``out``."""
    torch.ops.paged.paged_attention(
        out,
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        seq_lens,
        scale,
        sliding_window,
        logits_soft_cap,
    )


def copy_blocks(key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping: torch.Tensor) -> None:
    """For each ``(src, dst)`` row of ``block_mapping`` ``[n, 2]`` int64, copy block src to dst in every cache."""
    torch.ops.paged.copy_blocks(key_caches, value_caches, block_mapping)


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor:
    """Pack an fp32 ``[out_features, in_features]`` weight into ``[ceil(out / 16), in, 16]`` panels, once."""
    return torch.ops.paged.pack_linear_weight(weight)


def panel_linear(input: torch.Tensor, packed_weight: torch.Tensor, out_features: int) -> torch.Tensor:
    """``input @ weight.T`` ``[rows, out_features]`` for a weight packed by :func:`pack_linear_weight` (CPU, fp32).
    Built for few rows against a very wide weight: the LM head."""
    return torch.ops.paged.panel_linear(input, packed_weight, out_features)


def cpu_isas() -> dict[str, str]:
    """The instruction set each CPU kernel family runs with (``{"gemm": "avx512", "attention": "amx",
    "elementwise": "avx512"}``; ``elementwise``: the gated activations and RMSNorm)."""
    return {kernel: torch.ops.paged.cpu_isa(kernel) for kernel in CPU_KERNEL_FAMILIES}


def supported_cpu_isas() -> list[str]:
    return list(torch.ops.paged.supported_cpu_isas())


def set_cpu_isa(name: str, kernel: str | None = None) -> None:
    """Switch one kernel family (``gemm``, ``attention``, ``elementwise``), or all of them, to ``name`` (``avx2``,
    ``avx512`` or ``amx``), or to the family's highest variant below it (only the attention has an ``amx`` one);
    refused when this CPU lacks it."""
    for family in [kernel] if kernel else CPU_KERNEL_FAMILIES:
        torch.ops.paged.set_cpu_isa(name, family)


def argmax_rows(input: torch.Tensor) -> torch.Tensor:
    """``input.argmax(dim=-1)`` for ``[rows, n]`` fp32 on the CPU, in one vectorised pass (same ties and NaNs)."""
    return torch.ops.paged.argmax_rows(input)


def candidate_panels(scores: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """The ascending ids of the 16-column panels in which some row ``r`` of ``scores`` ``[rows, n]`` (fp32, CPU)
    has a value ``>= threshold[r]``: the union of every row's candidates, in one pass."""
    return torch.ops.paged.candidate_panels(scores, threshold)


def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
    """``input * rsqrt(mean(input**2, -1) + eps) * (offset + weight)`` in one pass per row (CPU, fp32 or bf16
    rounded where transformers rounds); ``input`` is ``[rows, d]`` or ``[tokens, heads, d]`` with contiguous rows;
    the result is contiguous."""
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    torch.ops.paged.rms_norm(out, input, weight, eps, offset)
    return out


def rotary_embedding_(query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate ``query`` ``[T, heads, d]`` and ``key`` ``[T, kv_heads, d]`` in place by ``cos``/``sin`` ``[T, d]``
    (``rotate_half`` convention; CPU, fp32 or bf16, bit-equal to ``layers.apply_rope``)."""
    torch.ops.paged.rotary_embedding(query, key, cos, sin)


def gated_activation(activation: str, gate_up: torch.Tensor) -> torch.Tensor:
    """``act(gate) * up`` ``[rows, d]`` from ``gate_up`` ``[rows, 2d]`` in one pass (CPU, fp32 or bf16);
    ``activation`` is a key of ``GATED_ACTIVATIONS``."""
    out = gate_up.new_empty((gate_up.shape[0], gate_up.shape[1] // 2))
    getattr(torch.ops.paged, GATED_ACTIVATIONS[activation])(out, gate_up)
    return out
