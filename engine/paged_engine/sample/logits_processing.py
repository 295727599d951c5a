"""Logit processing that happens before any row is sampled: penalties, bias, min-tokens, allow-lists and
structured-output grammars.

All in place on the step's ``[rows, vocab]`` fp32 logits, touching only the (row, token) pairs named in the
metadata (scatter/gather), never a dense ``[rows, vocab]`` mask; a grammar's mask is a bitmask (a bit per
token) over its own rows only.
"""

from __future__ import annotations

import torch

from paged_engine.sample.metadata import Penalties, SamplingMetadata, SparseTokens


def apply_penalties(logits: torch.Tensor, penalties: Penalties) -> None:
    """vLLM / OpenAI semantics, in this order.

    Repetition penalty (tokens seen in prompt or output): positive logits are divided by it, negative ones
    multiplied. Then OpenAI's ``logit -= frequency_penalty * count + presence_penalty * (count > 0)`` over
    the tokens generated so far.
    """
    seen = penalties.seen_tokens
    if seen is not None:
        rows = penalties.rows[seen.rows]
        current = logits[rows, seen.token_ids]
        factor = penalties.repetition[seen.rows]
        logits[rows, seen.token_ids] = torch.where(current > 0, current / factor, current * factor)
    counts = penalties.output_counts
    if counts is not None:
        assert counts.values is not None
        delta = penalties.frequency[counts.rows] * counts.values + penalties.presence[counts.rows]
        logits.index_put_((penalties.rows[counts.rows], counts.token_ids), -delta, accumulate=True)


def apply_logit_bias(logits: torch.Tensor, bias: SparseTokens) -> None:
    assert bias.values is not None
    logits.index_put_((bias.rows, bias.token_ids), bias.values, accumulate=True)


def apply_ban(logits: torch.Tensor, banned: SparseTokens) -> None:
    logits[banned.rows, banned.token_ids] = float("-inf")


def apply_allow_list(logits: torch.Tensor, allowed: SparseTokens) -> None:
    """Rows with an allow-list keep only those tokens; the others are untouched."""
    rows = torch.unique(allowed.rows)
    kept = logits[allowed.rows, allowed.token_ids]
    logits[rows] = float("-inf")
    logits[allowed.rows, allowed.token_ids] = kept


def process_logits(logits: torch.Tensor, metadata: SamplingMetadata) -> None:
    if metadata.penalties is not None:
        apply_penalties(logits, metadata.penalties)
    if metadata.logit_bias is not None:
        apply_logit_bias(logits, metadata.logit_bias)
    if metadata.allowed_tokens is not None:
        apply_allow_list(logits, metadata.allowed_tokens)
    if metadata.banned_tokens is not None:
        apply_ban(logits, metadata.banned_tokens)
    if metadata.grammar is not None:
        metadata.grammar.apply(logits)
