"""The head-first sampling paths, exercised with a tiny head so the tail matters.

With ``HEAD_SIZE`` 3 over 10 tokens: untruncated rows pick head or tail by mass (two-stage), truncation that
ends inside the head races there, and truncation reaching into the tail takes the full-vocabulary path.
Every path must give exactly the distribution its definition says.
"""

from __future__ import annotations

import pytest
import torch
from paged_engine.sample import SamplingRow, random_sampling
from paged_engine.sampling_params import SamplingParams
from sampling_helpers import chi_square, critical, frequencies, sample

PROBS = torch.tensor([0.2, 0.15, 0.12, 0.1, 0.1, 0.09, 0.08, 0.07, 0.05, 0.04])
DRAWS = 8000


@pytest.fixture(autouse=True)
def small_head(monkeypatch):
    monkeypatch.setattr(random_sampling, "HEAD_SIZE", 3)


def check(params: SamplingParams, expected: torch.Tensor) -> None:
    observed = frequencies(torch.log(PROBS), params, DRAWS)
    assert observed[expected == 0].sum() == 0, observed
    keep = expected > 0
    stat, df = chi_square(observed[keep], expected[keep] / expected.sum(), DRAWS)
    assert stat < critical(df - 1), (observed, expected)


def test_two_stage_head_or_tail_by_mass():
    check(SamplingParams(temperature=1.0), PROBS)  # head mass 0.47: the tail wins about half the time


def test_two_stage_with_temperature():
    check(SamplingParams(temperature=0.6), torch.softmax(torch.log(PROBS) / 0.6, dim=-1))


def test_top_p_inside_the_head():
    check(SamplingParams(top_p=0.3), torch.where(torch.arange(10) < 2, PROBS, 0.0))


def test_top_p_reaching_into_the_tail():
    check(SamplingParams(top_p=0.8), torch.where(torch.arange(10) < 7, PROBS, 0.0))


def test_min_p_excluding_the_tail():
    check(SamplingParams(min_p=0.61), torch.where(PROBS >= 0.122, PROBS, 0.0))


def test_min_p_keeping_part_of_the_tail():
    check(SamplingParams(min_p=0.38), torch.where(PROBS >= 0.076, PROBS, 0.0))


def test_seeded_rows_reproduce_on_every_path():
    row_logits = torch.log(PROBS)
    params = [SamplingParams(seed=1), SamplingParams(top_p=0.3, seed=2), SamplingParams(top_p=0.8, seed=3)]

    def run(order: list[int], filler: int) -> dict[int, list[int]]:
        rows = {i: SamplingRow.create(params[i], [1]) for i in order}
        out: dict[int, list[int]] = {i: [] for i in order}
        for _ in range(12):
            batch = [rows[i] for i in order] + [SamplingRow.create(SamplingParams(top_k=2), [1])] * filler
            tokens = sample(row_logits.repeat(len(batch), 1), batch)
            for pos, i in enumerate(order):
                out[i].append(int(tokens[pos]))
                rows[i].output_token_ids.append(int(tokens[pos]))
        return out

    first = run([0, 1, 2], filler=0)
    assert run([2, 1, 0], filler=1) == first
    assert run([1, 0, 2], filler=3) == first
    assert max(first[0]) >= 3  # the two-stage row did draw from the tail
