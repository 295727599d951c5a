"""Top-p and min-p truncation of probabilities, batched across rows.

These are the full-vocabulary fallbacks and shared pieces; the sampler avoids the full vocabulary whenever a
head of candidates decides (see ``random_sampling.py``).
"""

from __future__ import annotations

import torch


def nucleus_threshold(
    sorted_probs: torch.Tensor, top_p: torch.Tensor, cumulative: torch.Tensor | None = None
) -> torch.Tensor:
    """Per row, the smallest probability kept: the nucleus is the shortest prefix whose mass reaches top_p.

    ``sorted_probs`` is in descending order: a whole distribution, or the head of one (then the nucleus is cut
    at the head's end if the head's mass does not reach top_p).
    """
    if cumulative is None:
        cumulative = sorted_probs.cumsum(dim=-1)
    # Count tokens whose preceding mass is still short of top_p; the first token always counts.
    keep = (cumulative - sorted_probs < top_p.unsqueeze(1)).sum(dim=-1).clamp_min(1)
    return sorted_probs.gather(1, (keep - 1).unsqueeze(1))


def apply_top_p_sorting(probs: torch.Tensor, top_p: torch.Tensor) -> None:
    """Zero, in place, probabilities outside each row's nucleus, by a full sort of the rows with top_p < 1.

    ``probs`` need not be normalized: the nucleus is taken relative to each row's total.
    """
    rows = (top_p < 1.0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    ordered = torch.sort(probs[rows], dim=-1, descending=True).values
    cumulative = ordered.cumsum(dim=-1)
    threshold = nucleus_threshold(ordered, top_p[rows] * cumulative[:, -1], cumulative)
    sub = probs[rows]
    probs[rows] = sub.masked_fill_(sub < threshold, 0.0)


def apply_min_p(probs: torch.Tensor, min_p: torch.Tensor) -> None:
    """Zero, in place, probabilities below ``min_p`` times the row's largest probability."""
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    probs.masked_fill_(probs < threshold, 0.0)
