"""The batched sampler: one call per step over every row that samples.

Order: logprobs of the raw logits (rows that asked) → penalties, bias, allow-lists, min-tokens bans →
argmax for greedy rows → temperature, top-k, top-p, min-p and an exponential race for the others.

The exponential race picks ``argmax(p_i / E_i)`` with ``E_i ~ Exponential(1)``, which selects token ``i``
with probability ``p_i`` (the minimum of independent exponentials with rates ``p_i``), needs no normalized
distribution and no cumulative sum, and draws a count of numbers per row per step that depends only on the
row's own parameters (the vocabulary size, or k for a top-k row, which samples among its k candidates) from
the row's generator, so a seeded row's stream does not depend on what else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged_engine.core.outputs import Logprobs
from paged_engine.sample.logits_processing import process_logits
from paged_engine.sample.logprobs import LogprobsTensors, gather_logprobs
from paged_engine.sample.metadata import SamplingMetadata
from paged_engine.sample.truncation import apply_min_p, apply_top_p, nucleus_threshold


@dataclass
class SamplerOutput:
    sampled_token_ids: torch.Tensor  # int64 [rows]
    logprobs: LogprobsTensors | None  # one row per metadata.logprob_rows entry

    def logprobs_per_row(self, metadata: SamplingMetadata) -> list[Logprobs | None]:
        """Each batch row's logprobs cut to its own N, or None where the request did not ask."""
        result: list[Logprobs | None] = [None] * metadata.num_rows
        if self.logprobs is None or metadata.logprob_rows is None:
            return result
        for j, row in enumerate(metadata.logprob_rows.tolist()):
            result[row] = self.logprobs.row(j, metadata.num_logprobs[row])
        return result


class Sampler:
    """Stateless; the per-request state (generators, token history) lives in the metadata."""

    def __call__(self, logits: torch.Tensor, metadata: SamplingMetadata) -> SamplerOutput:
        """Sample one token per row. ``logits`` ([rows, vocab], fp32) is modified in place (other dtypes are
        copied to fp32 first: half precision loses the small differences top-p and logprobs depend on)."""
        if logits.dim() != 2 or logits.shape[0] != metadata.num_rows:
            raise ValueError(f"logits of shape {tuple(logits.shape)} for {metadata.num_rows} sampling rows")
        logits = logits.float()
        raw_logprobs = None
        if metadata.logprob_rows is not None:
            raw_logprobs = torch.log_softmax(logits[metadata.logprob_rows], dim=-1)

        process_logits(logits, metadata)
        if metadata.all_greedy:
            sampled = logits.argmax(dim=-1)
        else:
            assert metadata.random_rows is not None
            if metadata.random_rows.numel() == metadata.num_rows:
                sampled = _sample_random(logits, metadata)
            else:
                sampled = logits.argmax(dim=-1)
                sampled[metadata.random_rows] = _sample_random(logits[metadata.random_rows], metadata)

        logprobs = None
        if raw_logprobs is not None:
            assert metadata.logprob_rows is not None
            logprobs = gather_logprobs(raw_logprobs, sampled[metadata.logprob_rows], max(metadata.max_num_logprobs, 0))
        return SamplerOutput(sampled_token_ids=sampled, logprobs=logprobs)


@dataclass
class _RandomRows:
    """The sampling parameters of a subset of the random rows, positions renumbered from 0."""

    temperature: torch.Tensor | None
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    min_p: torch.Tensor | None
    generators: dict[int, torch.Generator]

    def select(self, rows: list[int], device: torch.device) -> _RandomRows:
        index = torch.tensor(rows, dtype=torch.int64, device=device)
        position = {row: i for i, row in enumerate(rows)}

        def pick(values: torch.Tensor | None) -> torch.Tensor | None:
            return None if values is None else values[index]

        return _RandomRows(
            temperature=pick(self.temperature),
            top_k=pick(self.top_k),
            top_p=pick(self.top_p),
            min_p=pick(self.min_p),
            generators={position[row]: g for row, g in self.generators.items() if row in position},
        )


def _sample_random(logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
    """Sample the random rows; ``logits`` holds exactly those rows, in metadata.random_rows order, and is consumed.

    Rows with top-k never touch the full vocabulary after one partial ``topk``: temperature, top-p, min-p and
    the race all run on their k candidates. The other rows go through the full-vocabulary path. Which path a
    row takes depends only on its own parameters, so a seeded row consumes the same random numbers whatever
    else is in the batch.
    """
    rows = _RandomRows(metadata.temperature, metadata.top_k, metadata.top_p, metadata.min_p, metadata.generators)
    if rows.top_k is None:
        return _sample_full_vocab(logits, rows)
    with_k = (rows.top_k < logits.shape[-1]).tolist()
    if all(with_k):
        return _sample_top_k(logits, rows)
    k_rows = [i for i, has_k in enumerate(with_k) if has_k]
    full_rows = [i for i, has_k in enumerate(with_k) if not has_k]
    sampled = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    sampled[k_rows] = _sample_top_k(logits[k_rows], rows.select(k_rows, logits.device))
    sub = rows.select(full_rows, logits.device)
    sub.top_k = None
    sampled[full_rows] = _sample_full_vocab(logits[full_rows], sub)
    return sampled


def _sample_top_k(logits: torch.Tensor, rows: _RandomRows) -> torch.Tensor:
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
    choice = probs.div_(_exponential_noise(probs, rows.generators, k.tolist())).argmax(dim=-1)
    return indices.gather(1, choice.unsqueeze(1)).squeeze(1)


def _sample_full_vocab(logits: torch.Tensor, rows: _RandomRows) -> torch.Tensor:
    if rows.temperature is not None:
        logits.div_(rows.temperature.unsqueeze(1))
    probs = torch.softmax(logits, dim=-1)
    if rows.top_p is not None:
        apply_top_p(probs, rows.top_p)
    if rows.min_p is not None:
        apply_min_p(probs, rows.min_p)
    return probs.div_(_exponential_noise(probs, rows.generators)).argmax(dim=-1)


def _exponential_noise(
    like: torch.Tensor, generators: dict[int, torch.Generator], lengths: list[int] | None = None
) -> torch.Tensor:
    """Exponential(1) draws shaped like ``like``; seeded row ``r`` draws ``lengths[r]`` (default: all) from its own
    generator, so its stream does not depend on the batch.

    Drawn as -log(U), several times faster on CPU than ``Tensor.exponential_``. U lies in [0, 1), so a draw is
    never 0; U == 0 gives an infinite draw, which only makes that token lose the race.
    """
    noise = torch.empty_like(like)
    if len(generators) < like.shape[0]:
        noise.uniform_()
    else:
        noise.fill_(0.5)  # positions no seeded draw covers hold masked tokens; any positive value works
    for row, generator in generators.items():
        span = noise[row] if lengths is None else noise[row, : lengths[row]]
        span.uniform_(generator=generator)
    return noise.log_().neg_()
