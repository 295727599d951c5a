"""The ``cuda`` attention backend: our paged decode kernel, with FlashAttention for prefill where it applies.

Batches that hold prefill rows (more query rows than sequences, a shape-only test, so no device sync) go to
FlashAttention-2's varlen kernel with a block table when ``flash_attn`` is installed and can read our cache
(bf16/fp16, page size a multiple of 256, FlashAttention-2's paged-KV requirement). Everything else, decode in
particular, runs ``paged::paged_attention``'s CUDA kernel, which never synchronises with the host and so can be
captured in CUDA graphs.
"""

from __future__ import annotations

import importlib.util
import logging

import torch

from paged_engine.attention.cpu import KernelBackend

log = logging.getLogger(__name__)

FLASH_PAGE_MULTIPLE = 256


class CudaKernelBackend(KernelBackend):
    name = "cuda"

    def __init__(self) -> None:
        super().__init__()
        if not (torch.cuda.is_available() and self.extension.with_cuda):
            raise RuntimeError(
                "attention backend 'cuda' needs a visible GPU and the CUDA kernels "
                f"(torch CUDA {torch.version.cuda}, GPU visible: {torch.cuda.is_available()}, "
                f"CUDA kernels built: {self.extension.with_cuda})"
            )
        self._flash = _load_flash_attn()
        log.info("cuda attention: prefill through %s", "flash_attn" if self._flash else "the paged kernel")

    def paged_attention(
        self,
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
        if self._flash is not None and _flash_applies(query, key_cache, seq_lens):
            _flash_prefill(
                self._flash, out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale,
                sliding_window, logits_soft_cap,
            )  # fmt: skip
            return
        super().paged_attention(
            out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, sliding_window,
            logits_soft_cap,
        )  # fmt: skip


def _load_flash_attn():
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError as exc:  # installed but built for another torch/CUDA
        log.warning("flash_attn is installed but does not import (%s); prefill uses the paged kernel", exc)
        return None
    return flash_attn_varlen_func


def _flash_applies(query: torch.Tensor, key_cache: torch.Tensor, seq_lens: torch.Tensor) -> bool:
    has_prefill = query.shape[0] > seq_lens.shape[0]
    return (
        has_prefill
        and query.is_cuda
        and query.dtype in (torch.float16, torch.bfloat16)
        and key_cache.shape[1] % FLASH_PAGE_MULTIPLE == 0
    )


def _flash_prefill(
    flash_attn_varlen_func,
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
    """FlashAttention-2 varlen over the paged cache. Its causal mask is aligned to the end of the keys, which is
    our "queries are the last q_len positions" rule; window (w - 1, 0) is our (p - w, p]. The max lengths are
    upper bounds from shapes, which FlashAttention accepts, so no device sync is needed."""
    num_rows = int(query_start_loc.shape[0]) - 1
    cu_seqlens_k = torch.zeros(num_rows + 1, dtype=torch.int32, device=seq_lens.device)
    torch.cumsum(seq_lens, 0, out=cu_seqlens_k[1:])
    result = flash_attn_varlen_func(
        query,
        key_cache,
        value_cache,
        cu_seqlens_q=query_start_loc,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=query.shape[0],
        max_seqlen_k=block_tables.shape[1] * key_cache.shape[1],
        softmax_scale=scale,
        causal=True,
        window_size=(sliding_window - 1, 0) if sliding_window > 0 else (-1, -1),
        softcap=logits_soft_cap,
        block_table=block_tables,
    )
    out.copy_(result)  # rows past query_start_loc[-1] (graph padding) hold whatever FlashAttention left there
