"""What the model runner needs from a sampler: ``sample(logits, rows) -> SampleResult``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from paged_engine.core.outputs import Logprobs
from paged_engine.worker.input_batch import RowState


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[Logprobs | None] | None = None


class RowSampler(Protocol):
    def sample(self, logits: torch.Tensor, rows: list[RowState]) -> SampleResult: ...


class GreedySampler:
    """Argmax with optional top-N logprobs; the deterministic yardstick used by the correctness tests."""

    def sample(self, logits: torch.Tensor, rows: list[RowState]) -> SampleResult:
        token_ids = logits.argmax(dim=-1)
        want = [r.sampling_params.logprobs for r in rows]
        if all(n is None for n in want):
            return SampleResult(token_ids.tolist())
        logprobs = torch.log_softmax(logits, dim=-1)
        out: list[Logprobs | None] = []
        for i, n in enumerate(want):
            if n is None:
                out.append(None)
                continue
            chosen = int(token_ids[i])
            top = torch.topk(logprobs[i], n) if n else None
            ids = [chosen, *(top.indices.tolist() if top is not None else [])]
            values = [float(logprobs[i, chosen]), *(top.values.tolist() if top is not None else [])]
            rank = int((logprobs[i] > logprobs[i, chosen]).sum()) + 1
            out.append(Logprobs(ids, values, [rank, *range(1, len(ids))]))
        return SampleResult(token_ids.tolist(), out)
