"""The batched sampler: one call per step over every row that samples.

Order: logprobs of the raw logits (rows that asked) → penalties, bias, allow-lists, min-tokens bans →
argmax for greedy rows → temperature, top-k, top-p, min-p and an exponential race for the others
(``random_sampling.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from paged_engine.core.scheduler_output import Logprobs
from paged_engine.sample.logits_processing import process_logits
from paged_engine.sample.logprobs import LogprobsTensors, gather_logprobs
from paged_engine.sample.metadata import SamplingMetadata
from paged_engine.sample.random_sampling import RandomRows, sample_random


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


def torch_argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


class Sampler:
    """Stateless; the per-request state (generators, token history) lives in the metadata.

    ``argmax`` picks greedy rows' tokens from ``[rows, vocab]`` fp32 logits: torch's by default, the CPU
    kernel's (``ops.argmax_rows``, 3.5x faster on 64 rows of a 262,144-token vocabulary) where the runner has it.
    """

    def __init__(self, argmax: Callable[[torch.Tensor], torch.Tensor] = torch_argmax) -> None:
        self.argmax = argmax

    def __call__(self, logits: torch.Tensor, metadata: SamplingMetadata) -> SamplerOutput:
        """Sample one token per row. ``logits`` ([rows, vocab], fp32) is modified in place (other dtypes are
        copied to fp32 first: half precision loses the small differences top-p and logprobs depend on)."""
        if logits.dim() != 2 or logits.shape[0] != metadata.num_rows:
            raise ValueError(f"logits of shape {tuple(logits.shape)} for {metadata.num_rows} sampling rows")
        logits = logits.float()
        # Logprobs describe the raw logits; keep a copy only if sampling is about to change them.
        untouched = metadata.all_greedy and not metadata.modifies_logits
        raw = None
        if metadata.logprob_rows is not None and not untouched:
            raw = logits[metadata.logprob_rows]

        process_logits(logits, metadata)
        if metadata.all_greedy:
            sampled = self.argmax(logits)
        else:
            assert metadata.random_rows is not None
            rows = RandomRows(metadata.temperature, metadata.top_k, metadata.top_p, metadata.min_p, metadata.generators)
            if metadata.random_rows.numel() == metadata.num_rows:
                sampled = sample_random(logits, rows)
            else:
                sampled = self.argmax(logits)
                sampled[metadata.random_rows] = sample_random(logits[metadata.random_rows], rows)

        logprobs = None
        if metadata.logprob_rows is not None:
            if raw is None:
                all_rows = metadata.logprob_rows.numel() == metadata.num_rows
                raw = logits if all_rows else logits[metadata.logprob_rows]
            chosen = sampled[metadata.logprob_rows]
            logprobs = gather_logprobs(raw, chosen, max(metadata.max_num_logprobs, 0))
        return SamplerOutput(sampled_token_ids=sampled, logprobs=logprobs)
