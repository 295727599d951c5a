"""The batched sampler: one call per step over every row that samples.

Order: logprobs of the raw logits (rows that asked) → penalties, bias, allow-lists, min-tokens bans →
argmax for greedy rows → temperature, top-k, top-p, min-p and an exponential race for the others.

The exponential race picks ``argmax(p_i / E_i)`` with ``E_i ~ Exponential(1)``, which selects token ``i``
with probability ``p_i`` (the minimum of independent exponentials with rates ``p_i``), needs no normalized
distribution and no cumulative sum, and draws exactly ``vocab`` numbers per row per step from the row's
generator, so a seeded row's stream does not depend on what else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged_engine.core.outputs import Logprobs
from paged_engine.sample.logits_processing import process_logits
from paged_engine.sample.logprobs import LogprobsTensors, gather_logprobs
from paged_engine.sample.metadata import SamplingMetadata
from paged_engine.sample.truncation import apply_min_p, apply_top_k, apply_top_p


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
        """Sample one token per row. ``logits`` ([rows, vocab], fp32) is modified in place."""
        if logits.dim() != 2 or logits.shape[0] != metadata.num_rows:
            raise ValueError(f"logits of shape {tuple(logits.shape)} for {metadata.num_rows} sampling rows")
        raw_logprobs = None
        if metadata.logprob_rows is not None:
            raw_logprobs = torch.log_softmax(logits[metadata.logprob_rows], dim=-1)

        process_logits(logits, metadata)
        sampled = logits.argmax(dim=-1)
        if not metadata.all_greedy:
            assert metadata.random_rows is not None
            if metadata.random_rows.numel() == metadata.num_rows:
                sampled = _sample_random(logits, metadata)
            else:
                sampled[metadata.random_rows] = _sample_random(logits[metadata.random_rows], metadata)

        logprobs = None
        if raw_logprobs is not None:
            assert metadata.logprob_rows is not None
            logprobs = gather_logprobs(raw_logprobs, sampled[metadata.logprob_rows], max(metadata.max_num_logprobs, 0))
        return SamplerOutput(sampled_token_ids=sampled, logprobs=logprobs)


def _sample_random(logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
    """Sample the random rows; ``logits`` holds exactly those rows, in metadata.random_rows order, and is consumed."""
    assert metadata.temperature is not None
    logits.div_(metadata.temperature.unsqueeze(1))
    if metadata.top_k is not None:
        apply_top_k(logits, metadata.top_k)
    probs = torch.softmax(logits, dim=-1)
    if metadata.top_p is not None:
        apply_top_p(probs, metadata.top_p)
    if metadata.min_p is not None:
        apply_min_p(probs, metadata.min_p)

    # Exponential(1) draws as -log(U): several times faster on CPU than Tensor.exponential_. U is in [0, 1),
    # so a draw is never 0; U == 0 gives an infinite draw, which only makes that token lose the race.
    noise = torch.empty_like(probs)
    if len(metadata.generators) < probs.shape[0]:
        noise.uniform_()
    for row, generator in metadata.generators.items():
        noise[row].uniform_(generator=generator)
    noise.log_().neg_()
    return probs.div_(noise).argmax(dim=-1)
