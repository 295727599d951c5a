"""Beam-search bookkeeping: which continuations survive a step, which hypotheses are finished, when to stop.

Pure policy over numbers (no torch, no blocks): the scheduler feeds it each live beam's top candidates and
forks the block tables as it decides. It reproduces Hugging Face transformers' ``generate(num_beams=W,
do_sample=False)`` (the vectorised implementation of transformers 4.50+):

* **Candidates.** Each step ranks every (beam, token) pair by the beam's cumulative logprob plus the token's
  logprob and keeps the best ``K = max(2, 1 + number of stop tokens) * W``. Each beam's own top ``K`` tokens
  therefore suffice as input: no pair outside them can enter the global top ``K``.
* **Finished hypotheses.** A candidate that ends (a stop token, or the length limit) becomes a hypothesis only
  if it ranks among the first ``W`` candidates; its score is ``cum_logprob / generated_len ** length_penalty``
  (``generated_len`` counts the stop token). At most ``W`` hypotheses are kept, best first.
* **Next beams.** The best ``W`` candidates that did not end, in rank order. Beam ``i`` of the next step is
  ``(parent index, token)``; a parent may be chosen several times (its blocks are then shared) or not at all
  (pruned).
* **Stopping.** ``early_stopping=True``: once ``W`` hypotheses exist. ``False``: once the best live beam, scored at
  its current length, cannot beat the worst of ``W`` hypotheses. ``"never"``: the same, but with a positive
  length penalty the live beam is scored at the longest length it may still reach. Always at the length limit.

Invariants: the live beams all have the same length; there are never more than ``W`` of either live beams or
hypotheses; hypotheses are sorted best first; once ``done`` the state changes no more.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

EarlyStopping = bool | Literal["never"]
EARLY_STOPPING_VALUES: tuple[EarlyStopping, ...] = (True, False, "never")


def candidates_per_beam(width: int, num_stop_tokens: int) -> int:
    """Top tokens each beam must report per step (``K`` above)."""
    return max(2, 1 + num_stop_tokens) * width


@dataclass(frozen=True)
class Beam:
    """A live or finished sequence: generated tokens only (the prompt is shared by all)."""

    token_ids: tuple[int, ...]
    cum_logprob: float


@dataclass(frozen=True)
class Hypothesis:
    token_ids: tuple[int, ...]
    cum_logprob: float
    score: float  # cum_logprob / len(token_ids) ** length_penalty
    stopped: bool  # its last token is a stop token (else it ended at the length limit)


@dataclass(frozen=True)
class Continuation:
    """Next-step beam ``parent`` (index into the current beams) extended by ``token_id``."""

    parent: int
    token_id: int


@dataclass
class BeamSearch:
    width: int
    max_new_tokens: int
    stop_token_ids: Collection[int] = frozenset()
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    beams: list[Beam] = field(default_factory=lambda: [Beam((), 0.0)])
    hypotheses: list[Hypothesis] = field(default_factory=list)
    done: bool = False
    _improvable: bool = True  # transformers' "early-stop heuristic unsatisfied"

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"beam width must be at least 1, got {self.width}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.early_stopping not in EARLY_STOPPING_VALUES:
            raise ValueError(f"early_stopping must be true, false or 'never', got {self.early_stopping!r}")

    @property
    def num_candidates(self) -> int:
        return candidates_per_beam(self.width, len(self.stop_token_ids))

    def step(self, candidates: Sequence[Sequence[tuple[int, float]]]) -> list[Continuation]:
        """Advance by one token. ``candidates[i]``: (token id, logprob) pairs of beam ``i``, at least its top
        ``num_candidates`` (fewer only if the vocabulary is smaller). Returns the next beams' origins, in beam
        order; empty once the search is done."""
        if self.done:
            raise RuntimeError("the beam search is already done")
        if len(candidates) != len(self.beams):
            raise ValueError(f"{len(candidates)} candidate lists for {len(self.beams)} beams")
        length = len(self.beams[0].token_ids) + 1
        ranked = heapq.nlargest(
            self.num_candidates,
            (
                (beam.cum_logprob + logprob, i, token)
                for i, beam in enumerate(self.beams)
                for token, logprob in candidates[i]
            ),
            key=lambda c: c[0],
        )
        at_limit = length >= self.max_new_tokens
        ends = [at_limit or token in self.stop_token_ids for _, _, token in ranked]

        full = len(self.hypotheses) >= self.width
        if self._improvable and not (full and self.early_stopping is True):
            finished = [
                Hypothesis(
                    (*self.beams[i].token_ids, token),
                    cum,
                    cum / length**self.length_penalty,
                    token in self.stop_token_ids,
                )
                for rank, (cum, i, token) in enumerate(ranked[: self.width])
                if ends[rank]
            ]
            if finished:
                merged = self.hypotheses + finished
                self.hypotheses = sorted(merged, key=lambda h: h.score, reverse=True)[: self.width]

        chosen = [c for c, end in zip(ranked, ends, strict=True) if not end][: self.width]
        self.beams = [Beam((*self.beams[i].token_ids, token), cum) for cum, i, token in chosen]
        if chosen and len(self.hypotheses) >= self.width:
            if self.early_stopping == "never" and self.length_penalty > 0.0:
                best_length = self.max_new_tokens
            else:
                best_length = length
            best_possible = chosen[0][0] / best_length**self.length_penalty
            self._improvable = best_possible > self.hypotheses[-1].score
        self.done = (
            not chosen or not self._improvable or (len(self.hypotheses) >= self.width and self.early_stopping is True)
        )
        if self.done:
            self.beams = []
            return []
        return [Continuation(i, token) for _, i, token in chosen]

    def best(self, n: int) -> list[Hypothesis]:
        """The ``n`` best finished hypotheses, best first (call once ``done``)."""
        if not self.done:
            raise RuntimeError("the beam search is not done yet")
        return self.hypotheses[:n]
