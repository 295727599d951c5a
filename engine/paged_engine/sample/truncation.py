"""Top-p and min-p truncation of probabilities, batched across rows.

These are the full-vocabulary fallbacks and shared pieces; the sampler avoids the full vocabulary whenever a
head of candidates decides (see ``random_sampling.py``).
"""

from __future__ import annotations

import torch

WIDE_HEAD_SIZE = 16384


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


def apply_top_p(probs: torch.Tensor, top_p: torch.Tensor) -> None:
    """Zero, in place, probabilities outside each row's nucleus (rows with top_p < 1 only).

    ``probs`` need not be normalized: the nucleus is taken relative to each row's total. The nucleus is first
    looked for in the row's top ``WIDE_HEAD_SIZE`` (a partial ``topk``, several times cheaper than sorting the
    row); only rows whose nucleus is wider still are fully sorted.
    """
    rows = (top_p < 1.0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    sub = probs[rows]
    target = top_p[rows] * sub.sum(dim=-1)
    head = torch.topk(sub, min(WIDE_HEAD_SIZE, sub.shape[-1]), dim=-1, sorted=True).values
    cumulative = head.cumsum(dim=-1)
    threshold = nucleus_threshold(head, target, cumulative)
    wider = (cumulative[:, -1] < target).nonzero().squeeze(1)
    if head.shape[-1] < sub.shape[-1] and wider.numel():
        ordered = torch.sort(sub[wider], dim=-1, descending=True).values
        threshold[wider] = nucleus_threshold(ordered, target[wider])
    probs[rows] = sub.masked_fill_(sub < threshold, 0.0)


def apply_min_p(probs: torch.Tensor, min_p: torch.Tensor) -> None:
    """Zero, in place, probabilities below ``min_p`` times the row's largest probability."""
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    probs.masked_fill_(probs < threshold, 0.0)
