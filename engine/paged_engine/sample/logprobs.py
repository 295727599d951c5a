"""Logprobs of sampled and prompt tokens.

What is reported is the model's raw distribution: ``log_softmax`` of the logits as the model produced
them, before penalties, bias, temperature or truncation. That is vLLM's default (``raw_logprobs``) and what
OpenAI's API documents (the likelihood of a token under the model), and it keeps a token's reported
probability independent of which sampling knobs a request turned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged_engine.core.scheduler_output import Logprobs


@dataclass
class LogprobsTensors:
    """Column 0 is the chosen (sampled or prompt) token, columns 1.. the top-N, best first."""

    token_ids: torch.Tensor  # int64 [rows, 1 + N]
    logprobs: torch.Tensor  # float32 [rows, 1 + N]
    ranks: torch.Tensor  # int64 [rows, 1 + N]; 1 is the most likely token

    def row(self, index: int, num_logprobs: int) -> Logprobs:
        """One row as the engine's output type, cut to the row's own N."""
        width = 1 + num_logprobs
        return Logprobs(
            token_ids=self.token_ids[index, :width].tolist(),
            logprobs=self.logprobs[index, :width].tolist(),
            ranks=self.ranks[index, :width].tolist(),
        )


def gather_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, num_logprobs: int) -> LogprobsTensors:
    """Top-``num_logprobs`` plus the logprob and rank of ``token_ids[i]`` under ``log_softmax(logits[i])``.

    Consumes ``logits`` (normalized in place): ``log_softmax`` would allocate and write a second
    ``[rows, vocab]`` tensor only to read a handful of its values.
    """
    chosen = token_ids.to(torch.int64).unsqueeze(1)
    chosen_logit = logits.gather(1, chosen)
    top_logits, top_ids = torch.topk(logits, max(num_logprobs, 1), dim=-1)
    # Rank: 1 + tokens strictly more likely. Usually the chosen token is the most likely one, which needs
    # no vocabulary-wide count.
    chosen_rank = torch.ones_like(chosen)
    others = (chosen_logit < top_logits[:, :1]).squeeze(1).nonzero().squeeze(1)
    if others.numel():
        chosen_rank[others] = (logits[others] > chosen_logit[others]).sum(dim=-1, keepdim=True) + 1
    peak = top_logits[:, :1].clone()
    log_norm = peak + logits.sub_(peak).exp_().sum(dim=-1, keepdim=True).log_()
    top_logits, top_ids = top_logits[:, :num_logprobs], top_ids[:, :num_logprobs]
    top_ranks = torch.arange(1, num_logprobs + 1, device=logits.device).expand(logits.shape[0], -1)
    return LogprobsTensors(
        token_ids=torch.cat([chosen, top_ids], dim=1),
        logprobs=torch.cat([chosen_logit, top_logits], dim=1).sub_(log_norm),
        ranks=torch.cat([chosen_rank, top_ranks], dim=1),
    )


def prompt_logprobs(logits: torch.Tensor, next_token_ids: torch.Tensor, num_logprobs: int) -> LogprobsTensors:
    """Logprobs for prompt positions: row ``i`` holds the logits predicting ``next_token_ids[i]``.

    The runner calls this in chunks of positions to bound memory (each row is a vocabulary-wide softmax).
    """
    if logits.shape[0] != next_token_ids.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of prompt logits but {next_token_ids.shape[0]} next tokens")
    return gather_logprobs(logits.float().clone(), next_token_ids, num_logprobs)
