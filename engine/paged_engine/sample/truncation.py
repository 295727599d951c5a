"""Top-p and min-p truncation of full-vocabulary ``[rows, vocab]`` probabilities, batched across rows.

(Top-k needs no mask: rows with top-k are sampled among their k candidates, see ``sampler.py``.)

Top-p needs the probabilities in descending order, but a full sort of a 262,144-token row is the most
expensive thing the sampler could do. Nucleus sets are almost always small, so the top ``NUCLEUS_GUESS``
probabilities are taken first (a partial ``topk``); only rows whose nucleus is not inside that prefix fall
back to a full sort. The result is exact either way.
"""

from __future__ import annotations

import torch

NUCLEUS_GUESS = 1024


def nucleus_threshold(
    sorted_probs: torch.Tensor, top_p: torch.Tensor, cumulative: torch.Tensor | None = None
) -> torch.Tensor:
    """Per row, the smallest probability kept: the nucleus is the shortest prefix whose mass reaches top_p.

    ``sorted_probs`` is in descending order and sums to 1 per row (or is a head of such a row).
    """
    if cumulative is None:
        cumulative = sorted_probs.cumsum(dim=-1)
    # Count tokens whose preceding mass is still short of top_p; the first token always counts.
    keep = (cumulative - sorted_probs < top_p.unsqueeze(1)).sum(dim=-1).clamp_min(1)
    return sorted_probs.gather(1, (keep - 1).unsqueeze(1))


def apply_top_p(probs: torch.Tensor, top_p: torch.Tensor) -> None:
    """Zero, in place, probabilities outside each row's nucleus; ``probs`` rows must sum to 1."""
    vocab = probs.shape[-1]
    guess = min(NUCLEUS_GUESS, vocab)
    head = torch.topk(probs, guess, dim=-1, sorted=True).values
    cumulative = head.cumsum(dim=-1)
    threshold = nucleus_threshold(head, top_p, cumulative)
    # The nucleus lies inside the head exactly when the head's mass reaches top_p.
    overflow = cumulative[:, -1] < top_p
    if guess < vocab and bool(overflow.any()):
        rows = overflow.nonzero().squeeze(1)
        full = torch.sort(probs[rows], dim=-1, descending=True).values
        threshold[rows] = nucleus_threshold(full, top_p[rows])
    probs.masked_fill_(probs < threshold, 0.0)


def apply_min_p(probs: torch.Tensor, min_p: torch.Tensor) -> None:
    """Zero, in place, probabilities below ``min_p`` times the row's largest probability."""
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    probs.masked_fill_(probs < threshold, 0.0)
