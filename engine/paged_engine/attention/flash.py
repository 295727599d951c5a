"""FlashAttention 4 (``flash-attn-4``, the ``paged[gpu]`` extra) over our paged cache, for prefill on Hopper and
Blackwell.

Why FlashAttention 4 and not 2: flash-attn 2 ships no wheels for current torch and builds from source for hours,
and its paged path needs pages of 256 tokens, while ours default to 16. flash-attn 4 (CuTe DSL) installs from
PyPI as a pure-Python wheel, compiles its kernels on first use, and reads pages of any size on SM 9.x/10.x
(through ``page_table`` and per-sequence ``seqused_k``), which is our layout as it is. It has no paged kernel for
SM 8.x or 12.x; our CUDA kernels serve those, and every decode step (graph-captured, see ``worker/cuda_graphs``).

Conventions mapped here: FlashAttention's causal mask is aligned to the end of the keys, which is our "queries
are the last q_len positions" rule; its window ``(w - 1, 0)`` is our ``(p - w, p]``. Length bounds come from
shapes, so nothing synchronises with the host.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

FlashVarlen = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class FlashAttention:
    varlen: FlashVarlen
    version: str


def load_flash_attention() -> FlashAttention | str:
    """FlashAttention 4's varlen entry point, or why it is not available (a message for the log and info)."""
    if importlib.util.find_spec("flash_attn") is None or importlib.util.find_spec("flash_attn.cute") is None:
        return "flash-attn-4 is not installed (pip install 'paged[gpu]')"
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception as exc:  # installed, but its CUDA/cutlass dependencies do not import
        return f"flash-attn-4 is installed but does not import: {exc}"
    return FlashAttention(flash_attn_varlen_func, importlib.metadata.version("flash-attn-4"))


def flash_prefill(
    varlen: FlashVarlen,
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int,
    logits_soft_cap: float,
) -> None:
    """Causal attention of the flat ``query`` rows over the paged cache through ``page_table``, into ``out``."""
    result, _ = varlen(
        query,
        key_cache,
        value_cache,
        cu_seqlens_q=query_start_loc,
        seqused_k=seq_lens,
        max_seqlen_q=query.shape[0],
        max_seqlen_k=block_tables.shape[1] * key_cache.shape[1],
        page_table=block_tables,
        softmax_scale=scale,
        causal=True,
        window_size=(sliding_window - 1, 0) if sliding_window > 0 else (None, None),
        softcap=logits_soft_cap,
    )
    out.copy_(result)
