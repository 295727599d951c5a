"""Sampling the non-greedy rows: temperature, top-k, top-p, min-p, then an exponential race.

The race picks ``argmax(p_i / E_i)`` with ``E_i ~ Exponential(1)``: token ``i`` wins with probability ``p_i``
(the minimum of independent exponentials with rates ``p_i``), with no normalization or cumulative sum.

Over a 262,144-token vocabulary the expensive part is anything done per token: softmax, noise, sorting.
So each row is first cut to a head of candidates by one partial ``topk``, and the full vocabulary is only
touched when the head provably cannot decide:

* top-k rows: the head is the k candidates (exactly top-k's definition);
* other rows: the head is the ``HEAD_SIZE`` most likely tokens, with exact probabilities (``logsumexp`` over
  the row). If top-p's nucleus or min-p's threshold excludes everything past the head, the row races within
  the head. Without truncation, the row first picks head or tail with their true masses, then races within
  the chosen part, which is the same distribution. Only rows whose truncation keeps part of the tail fall
  back to the full-vocabulary path (where top-p looks in a wider head before sorting a row).

Which path a row takes, and so how many random numbers it draws, depends only on its own parameters and
logits: a seeded row draws from its own generator and reproduces whatever else is in the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from paged_engine.sample.truncation import apply_min_p, apply_top_p, nucleus_threshold

HEAD_SIZE = 1024


@dataclass
class RandomRows:
    """Sampling parameters of the rows being sampled (``None``: no row uses it); positions count from 0."""

    temperature: torch.Tensor | None
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    min_p: torch.Tensor | None
    generators: dict[int, torch.Generator]

    def select(self, rows: list[int], device: torch.device) -> RandomRows:
        index = torch.tensor(rows, dtype=torch.int64, device=device)
        position = {row: i for i, row in enumerate(rows)}

        def pick(values: torch.Tensor | None) -> torch.Tensor | None:
            return None if values is None else values[index]

        return RandomRows(
            temperature=pick(self.temperature),
            top_k=pick(self.top_k),
            top_p=pick(self.top_p),
            min_p=pick(self.min_p),
            generators={position[row]: g for row, g in self.generators.items() if row in position},
        )


def sample_random(logits: torch.Tensor, rows: RandomRows) -> torch.Tensor:
    """One token per row of ``logits`` (consumed: scaled in place)."""
    with_k = [False] * logits.shape[0] if rows.top_k is None else (rows.top_k < logits.shape[-1]).tolist()
    groups = [
        ([i for i, has_k in enumerate(with_k) if has_k], _sample_top_k),
        ([i for i, has_k in enumerate(with_k) if not has_k], _sample_by_head),
    ]
    return _dispatch(logits, rows, groups)


RowSampler = Callable[[torch.Tensor, RandomRows], torch.Tensor]


def _dispatch(logits: torch.Tensor, rows: RandomRows, groups: list[tuple[list[int], RowSampler]]) -> torch.Tensor:
    """Run each ``(row subset, sampler)`` group on its rows; a group holding every row runs without copies."""
    sampled = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    for subset, sampler in groups:
        if len(subset) == logits.shape[0]:
            return sampler(logits, rows)
        if subset:
            sampled[subset] = sampler(logits[subset], rows.select(subset, logits.device))
    return sampled


def _sample_top_k(logits: torch.Tensor, rows: RandomRows) -> torch.Tensor:
    assert rows.top_k is not None
    k = rows.top_k
    values, indices = torch.topk(logits, int(k.max()), dim=-1, sorted=True)
    positions = torch.arange(values.shape[1], device=values.device)
    values.masked_fill_(positions >= k.unsqueeze(1), float("-inf"))
    if rows.temperature is not None:
        values.div_(rows.temperature.unsqueeze(1))
    probs = torch.softmax(values, dim=-1)  # sorted descending, like the values
    if rows.top_p is not None:
        probs.masked_fill_(probs < nucleus_threshold(probs, rows.top_p), 0.0)
    if rows.min_p is not None:
        apply_min_p(probs, rows.min_p)
    choice = _race(probs, rows.generators, k.tolist())
    return indices.gather(1, choice.unsqueeze(1)).squeeze(1)


def _sample_by_head(logits: torch.Tensor, rows: RandomRows) -> torch.Tensor:
    num_rows, vocab = logits.shape
    head_size = min(HEAD_SIZE, vocab)
    head_logits, head_ids = torch.topk(logits, head_size, dim=-1, sorted=True)  # temperature keeps the order
    # In place, no [rows, vocab] temporary: logits become unnormalized probabilities exp((l - max) / T).
    top = head_logits[:, :1].clone()
    weights, head_weights = logits.sub_(top), head_logits.sub_(top)
    if rows.temperature is not None:
        weights.div_(rows.temperature.unsqueeze(1))
        head_weights.div_(rows.temperature.unsqueeze(1))
    total = weights.exp_().sum(dim=-1, keepdim=True)
    head_probs = head_weights.exp_().div_(total)  # exact probabilities, descending
    head_mass = head_probs.sum(dim=-1)
    smallest = head_probs[:, -1].clone()  # every tail token is at most this likely
    truncated = torch.zeros(num_rows, dtype=torch.bool, device=logits.device)
    tail_out = torch.full((num_rows,), head_size == vocab, dtype=torch.bool, device=logits.device)
    if rows.top_p is not None:
        uses = rows.top_p < 1.0
        threshold = nucleus_threshold(head_probs, rows.top_p).masked_fill_(~uses.unsqueeze(1), 0.0)
        head_probs.masked_fill_(head_probs < threshold, 0.0)
        truncated |= uses
        tail_out |= uses & (head_mass >= rows.top_p)
    if rows.min_p is not None:
        uses = rows.min_p > 0.0
        threshold = rows.min_p * head_probs[:, 0]  # the most likely token is never cut by top-p
        head_probs.masked_fill_(head_probs < threshold.unsqueeze(1), 0.0)
        truncated |= uses
        tail_out |= uses & (smallest < threshold)

    in_head = tail_out.clone()
    two_stage = (~truncated & ~tail_out).nonzero().squeeze(1).tolist()
    if two_stage:
        # Head or tail, by their true masses; then a race within the part chosen.
        sub = rows.select(two_stage, logits.device)
        tail_mass = (1.0 - head_mass[two_stage]).clamp_min_(0.0)
        in_head[two_stage] = _uniform(len(two_stage), sub.generators, logits) >= tail_mass
    head_rows = in_head.nonzero().squeeze(1).tolist()
    full_rows = (~in_head).nonzero().squeeze(1).tolist()  # two-stage rows in the tail, truncation past the head

    sampled = torch.empty(num_rows, dtype=torch.int64, device=logits.device)
    if head_rows:
        choice = _race(head_probs[head_rows], rows.select(head_rows, logits.device).generators)
        sampled[head_rows] = head_ids[head_rows].gather(1, choice.unsqueeze(1)).squeeze(1)
    if full_rows:
        sub = rows.select(full_rows, logits.device)
        probs = weights[full_rows]  # unnormalized: top-p, min-p and the race are all relative
        tail_only = ~truncated[full_rows]
        if bool(tail_only.any()):  # two-stage rows that chose the tail: the head is out of the race
            probs[tail_only] = probs[tail_only].scatter_(1, head_ids[full_rows][tail_only], 0.0)
        if sub.top_p is not None:
            apply_top_p(probs, sub.top_p)
        if sub.min_p is not None:
            apply_min_p(probs, sub.min_p)
        sampled[full_rows] = _race(probs, sub.generators)
    return sampled


def _uniform(count: int, generators: dict[int, torch.Generator], like: torch.Tensor) -> torch.Tensor:
    """One U[0, 1) per row; seeded rows draw from their own generator."""
    draws = torch.rand(count, dtype=like.dtype, device=like.device)
    for row, generator in generators.items():
        draws[row : row + 1].uniform_(generator=generator)
    return draws


def _race(
    probs: torch.Tensor, generators: dict[int, torch.Generator], lengths: list[int] | None = None
) -> torch.Tensor:
    """``argmax(p / E)`` per row, ``E ~ Exponential(1)``; consumes ``probs``.

    Seeded row ``r`` draws ``lengths[r]`` numbers (default: the row width) from its own generator. E is drawn
    as -log(U), several times faster on CPU than ``Tensor.exponential_``; U lies in [0, 1), so E is never 0,
    and U == 0 gives an infinite E, which only makes that token lose.
    """
    noise = torch.empty_like(probs)
    if len(generators) < probs.shape[0]:
        noise.uniform_()
    else:
        noise.fill_(0.5)  # positions no seeded draw covers hold masked tokens; any positive value works
    for row, generator in generators.items():
        span = noise[row] if lengths is None else noise[row, : lengths[row]]
        span.uniform_(generator=generator)
    return probs.div_(noise.log_().neg_()).argmax(dim=-1)
