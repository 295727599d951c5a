"""The ``cuda`` attention backend: our paged kernels, with FlashAttention 4 for prefill where it applies.

Steps that hold prefill rows (more query rows than sequences: a shape-only test, so no device sync) go to
FlashAttention 4 when the ``gpu`` extra is installed and covers the GPU, dtype and head size (see
``selection.flash_gap``). Everything else, decode in particular, runs ``paged::paged_attention``'s CUDA kernel,
which never synchronises with the host and so is captured in CUDA graphs.
"""

from __future__ import annotations

import logging

import torch

from paged_engine.attention.cpu import KernelBackend
from paged_engine.attention.flash import FlashAttention, flash_prefill

log = logging.getLogger(__name__)


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
        self.flash: FlashAttention | None = None

    def use_flash_for_prefill(self, flash: FlashAttention) -> None:
        self.flash = flash

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
        if self.flash is not None and query.shape[0] > seq_lens.shape[0]:
            flash_prefill(
                self.flash.varlen, out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                scale, sliding_window, logits_soft_cap,
            )  # fmt: skip
            return
        super().paged_attention(
            out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, sliding_window,
            logits_soft_cap,
        )  # fmt: skip
