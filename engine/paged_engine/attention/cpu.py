"""The ``cpu`` attention backend: the C++/OpenMP kernels (``paged::*`` ops), reading the paged cache in place."""

from __future__ import annotations

import torch

from paged_engine.attention.backend import AttentionBackend
from paged_engine.kernels import ops


class KernelBackend(AttentionBackend):
    """Calls the ``paged`` torch ops; the dispatcher runs the CPU or CUDA kernel by the tensors' device.

    Construction loads (building on first use) the extension, so selecting this backend on a machine that
    cannot build it fails at start-up with the reason, not at the first request.
    """

    name = "kernels"

    def __init__(self) -> None:
        try:
            self.extension = ops.load()
        except ops.KernelBuildError as exc:
            raise RuntimeError(f"attention backend {self.name!r} needs the paged kernels: {exc}") from exc

    def reshape_and_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        ops.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)

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
        ops.paged_attention(
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

    def copy_blocks(
        self, key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping: torch.Tensor
    ) -> None:
        ops.copy_blocks(key_caches, value_caches, block_mapping)


class CpuKernelBackend(KernelBackend):
    name = "cpu"
