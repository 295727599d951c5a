"""The collectives a tensor-parallel model runs, over torch.distributed (gloo on a CPU, NCCL on a GPU).

Every rank calls them in the same order with tensors of the same shape: the model's forward pass and the
sampler run identically on all ranks, so no rank waits on a collective the others skip.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from paged_engine.parallel.layout import PipelineStage, TensorShard


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


def tensor_groups(tp_size: int, pp_size: int) -> list[dist.ProcessGroup | None]:
    """One process group per pipeline stage, of its ``tp_size`` ranks (rank = stage × tp_size + tp rank). Every
    rank must create every group, in the same order; with one stage the whole world is the group (None)."""
    if pp_size == 1:
        return [None]
    return [dist.new_group([stage * tp_size + t for t in range(tp_size)]) for stage in range(pp_size)]


@dataclass
class TensorParallel:
    """A model's share (``shard``) and the sums and gathers that join the shares back up. ``seconds`` adds up
    the time spent in them (the runner reports it per step as the ``all_reduce`` phase; on a GPU, the launches)."""

    shard: TensorShard
    device: torch.device
    group: dist.ProcessGroup | None = None  # this stage's ranks (None: the whole world)
    seconds: float = 0.0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's partial ``x`` (row-parallel outputs, vocabulary-parallel embeddings)."""
        start = time.perf_counter()
        dist.all_reduce(x, group=self.group)
        self.seconds += time.perf_counter() - start
        return x

    def gather_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Each rank's ``[rows, vocab_per_rank]`` logits joined into ``[rows, vocab]``, padding cut off."""
        start = time.perf_counter()
        pieces = [torch.empty_like(logits) for _ in range(self.shard.size)]
        dist.all_gather(pieces, logits.contiguous(), group=self.group)
        self.seconds += time.perf_counter() - start
        return torch.cat(pieces, dim=-1)[:, : self.shard.vocab_size]

    def gather_argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Each row's greedy token from every rank's ``[rows, vocab_per_rank]`` logits: each rank's best value and
        token are gathered, the highest value wins, the lowest rank (so the lowest token) on a tie, as an argmax
        over the whole row picks. A soft cap is monotonic, so it is left out."""
        start = time.perf_counter()
        vocab = self.shard.vocab
        if len(vocab) < logits.shape[1]:  # the last rank's padding columns never win
            logits[:, len(vocab) :] = float("-inf")
        values, indices = logits.max(dim=-1)
        pair = torch.stack([values.double(), (indices + vocab.start).double()], dim=1)  # token ids exact in fp64
        pieces = [torch.empty_like(pair) for _ in range(self.shard.size)]
        dist.all_gather(pieces, pair, group=self.group)
        stacked = torch.stack(pieces)  # [ranks, rows, 2]
        best = stacked[:, :, 0].argmax(dim=0)  # the first (lowest) rank among equal maxima
        self.seconds += time.perf_counter() - start
        return stacked[best, torch.arange(stacked.shape[1], device=stacked.device), 1].long()


def world_min(value: int, device: torch.device) -> int:
    """The smallest ``value`` any rank holds (the KV pool is sized from the rank with least free memory)."""
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


@dataclass
class PipelineParallel:
    """A stage's links: hidden states from the stage before and to the stage after (each tensor-parallel rank
    to its peer: the states are whole on every rank after the all-reduce), and the sampled tokens from the last
    stage to every rank, so each stage's input batch grows as the sampling stage's does."""

    stage: PipelineStage
    tp_size: int
    device: torch.device
    seconds: float = 0.0

    @property
    def rank(self) -> int:
        return dist.get_rank()

    def receive_hidden(self, num_tokens: int, hidden_size: int, dtype: torch.dtype) -> torch.Tensor:
        start = time.perf_counter()
        hidden = torch.empty(num_tokens, hidden_size, dtype=dtype, device=self.device)
        dist.recv(hidden, src=self.rank - self.tp_size)
        self.seconds += time.perf_counter() - start
        return hidden

    def send_hidden(self, hidden: torch.Tensor) -> None:
        start = time.perf_counter()
        dist.send(hidden.contiguous(), dst=self.rank + self.tp_size)
        self.seconds += time.perf_counter() - start

    def share_tokens(self, tokens: list[int]) -> list[int]:
        """The last stage's sampled tokens (-1: none for that row), on every rank."""
        start = time.perf_counter()
        tensor = torch.tensor(tokens, dtype=torch.int64, device=self.device)
        dist.broadcast(tensor, src=(self.stage.size - 1) * self.tp_size)
        self.seconds += time.perf_counter() - start
        return tensor.tolist()
