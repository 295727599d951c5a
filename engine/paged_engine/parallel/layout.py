"""How tensor parallelism cuts one decoder between ``size`` ranks. Torch-free: the engine core and the checks of
``EngineConfig`` use it as the workers do.

Invariants (property-tested):
- the query heads, the MLP's intermediate rows and the vocabulary rows are partitioned: every index belongs to
  exactly one rank, in rank order;
- a rank's KV heads are those its query heads read: with at least as many KV heads as ranks each rank owns
  ``kv / size`` of them; with fewer, each KV head is replicated on ``size / kv`` consecutive ranks (Gemma 3 270M
  has one KV head, so every rank holds it);
- every rank holds the same number of vocabulary rows (``ceil(vocab / size)``; the last rank's tail is padding),
  so the gathered logits have equal-width pieces, and the padding is cut off after the gather.
"""

from __future__ import annotations

from dataclasses import dataclass


class ShardingError(ValueError):
    """A model that this tensor-parallel size cannot cut evenly; the message names the sizes at fault."""


@dataclass(frozen=True)
class TensorShard:
    """Rank ``rank`` of ``size``'s share of a model with these (whole-model) sizes."""

    rank: int
    size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ShardingError(f"rank {self.rank} is outside a tensor-parallel group of {self.size}")
        problems = []
        if self.num_heads % self.size:
            problems.append(f"{self.num_heads} attention heads")
        if self.num_kv_heads % self.size and self.size % self.num_kv_heads:
            problems.append(f"{self.num_kv_heads} KV heads (neither a multiple nor a divisor of the size)")
        if self.intermediate_size % self.size:
            problems.append(f"an intermediate size of {self.intermediate_size}")
        if problems:
            raise ShardingError(
                f"tensor-parallel size {self.size} cannot split a model with {' and '.join(problems)}; "
                "pick a size that divides them"
            )

    @property
    def heads(self) -> range:
        per_rank = self.num_heads // self.size
        return range(self.rank * per_rank, (self.rank + 1) * per_rank)

    @property
    def kv_heads(self) -> range:
        if self.num_kv_heads >= self.size:
            per_rank = self.num_kv_heads // self.size
            return range(self.rank * per_rank, (self.rank + 1) * per_rank)
        replicas = self.size // self.num_kv_heads
        head = self.rank // replicas
        return range(head, head + 1)

    @property
    def intermediate(self) -> range:
        per_rank = self.intermediate_size // self.size
        return range(self.rank * per_rank, (self.rank + 1) * per_rank)

    @property
    def vocab_per_rank(self) -> int:
        return -(-self.vocab_size // self.size)

    @property
    def vocab(self) -> range:
        """This rank's real vocabulary rows (the last rank's may be fewer than ``vocab_per_rank``)."""
        start = self.rank * self.vocab_per_rank
        return range(min(start, self.vocab_size), min(start + self.vocab_per_rank, self.vocab_size))


@dataclass(frozen=True)
class PipelineStage:
    """Stage ``rank`` of ``size``'s layers: consecutive, as even as can be, the earlier stages taking the extra
    ones. Every layer is on exactly one stage, in order (property-tested)."""

    rank: int
    size: int
    num_layers: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ShardingError(f"stage {self.rank} is outside a pipeline of {self.size}")
        if self.size > self.num_layers:
            raise ShardingError(f"pipeline-parallel size {self.size} is more than the model's {self.num_layers} "
                                "layers; pick at most one stage per layer")  # fmt: skip

    @property
    def layers(self) -> range:
        base, extra = divmod(self.num_layers, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (1 if self.rank < extra else 0))

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.size - 1
