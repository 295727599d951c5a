"""The collectives a tensor-parallel model runs, over torch.distributed (gloo on a CPU, NCCL on a GPU).

Every rank calls them in the same order with tensors of the same shape: the model's forward pass and the
sampler run identically on all ranks, so no rank waits on a collective the others skip.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from paged_engine.parallel.layout import TensorShard


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_group(rank: int, world_size: int, init_method: str, device: torch.device, timeout_s: float) -> str:
    """Join the process group every rank of this engine forms; returns the collective backend's name."""
    import datetime

    backend = backend_for(device)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )  # fmt: skip
    return backend


@dataclass
class TensorParallel:
    """A model's share (``shard``) and the sums and gathers that join the shares back up. ``seconds`` adds up
    the time spent in them (the runner reports it per step as the ``all_reduce`` phase; on a GPU, the launches)."""

    shard: TensorShard
    device: torch.device
    seconds: float = 0.0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's partial ``x`` (row-parallel outputs, vocabulary-parallel embeddings)."""
        start = time.perf_counter()
        dist.all_reduce(x)
        self.seconds += time.perf_counter() - start
        return x

    def gather_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Each rank's ``[rows, vocab_per_rank]`` logits joined into ``[rows, vocab]``, padding cut off."""
        start = time.perf_counter()
        pieces = [torch.empty_like(logits) for _ in range(self.shard.size)]
        dist.all_gather(pieces, logits.contiguous())
        self.seconds += time.perf_counter() - start
        return torch.cat(pieces, dim=-1)[:, : self.shard.vocab_size]

    def min(self, value: int) -> int:
        """The smallest ``value`` any rank holds (the KV pool is sized from the rank with least free memory)."""
        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return int(tensor.item())
