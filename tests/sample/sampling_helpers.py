"""Shared helpers for sampler tests: building rows, sampling, and seeded frequency / chi-square checks."""

from __future__ import annotations

import math

import torch
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow
from paged_engine.sampling_params import SamplingParams


def rows_for(*params: SamplingParams, prompt=(1, 2, 3)) -> list[SamplingRow]:
    return [SamplingRow.create(p, list(prompt)) for p in params]


def sample(logits: torch.Tensor, rows: list[SamplingRow], eos=(0,)) -> torch.Tensor:
    metadata = SamplingMetadata.build(rows, vocab_size=logits.shape[1], eos_token_ids=eos)
    return Sampler()(logits.clone(), metadata).sampled_token_ids


def fixed_logits(num_rows: int, seed: int = 0, vocab: int = 64) -> torch.Tensor:
    return torch.randn(num_rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def frequencies(logits_row: torch.Tensor, params: SamplingParams, draws: int) -> torch.Tensor:
    """Empirical distribution of ``draws`` samples of one row (batched as ``draws`` rows, one seed)."""
    logits = logits_row.expand(draws, -1).contiguous()
    rows = [SamplingRow.create(params, [1]) for _ in range(draws)]
    torch.manual_seed(1234)  # unseeded rows draw from the default generator: fixed so the test never flakes
    tokens = sample(logits, rows)
    return torch.bincount(tokens, minlength=logits.shape[1]).float() / draws


def chi_square(observed: torch.Tensor, expected: torch.Tensor, draws: int) -> tuple[float, int]:
    """Chi-square statistic over categories with expected count >= 5, and its degrees of freedom."""
    counts, exp = observed * draws, expected * draws
    big = exp >= 5
    stat = float(
        (((counts - exp) ** 2) / exp)[big].sum()
        + ((counts[~big].sum() - exp[~big].sum()) ** 2) / max(float(exp[~big].sum()), 1e-9)
    )
    return stat, int(big.sum())


def critical(df: int) -> float:
    """Upper 0.1% point of chi-square(df), Wilson-Hilferty approximation."""
    z = 3.09
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
