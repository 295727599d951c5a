"""What one request may ask of the model being served, checked before the request is queued.

Pure Python (no torch). The API server checks every request against these limits before it reaches the engine
core, ``LLM`` checks them before scheduling, and the engine core checks them again on admission, all through
this one rule set with one message per rule. A request that passes cannot fail inside a step for naming a token
the model doesn't have, a context longer than the model's, or more logprobs than the engine computes.

Messages name the field, the value and the limit, so they can go to the client as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from paged_engine.core.beam_search import candidates_per_beam
from paged_engine.core.scheduler import RequestValidationError
from paged_engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class RequestLimits:
    vocab_size: int  # token ids must lie in [0, vocab_size)
    max_model_len: int  # prompt plus generated tokens
    max_logprobs: int  # top-N logprobs per position, sampled or prompt

    def check(self, prompt_token_ids: Sequence[int], params: SamplingParams, prompt_param: str = "prompt") -> None:
        """Everything about one request that depends on the model; raises ``RequestValidationError``."""
        self.check_prompt(prompt_token_ids, prompt_param)
        self.check_max_tokens(len(prompt_token_ids), params.max_tokens)
        self.check_params(params)

    def check_prompt(self, token_ids: Sequence[int], param: str = "prompt") -> None:
        if not token_ids:
            raise RequestValidationError(param, f"{param} is empty: a request needs at least one prompt token")
        if len(token_ids) >= self.max_model_len:
            raise RequestValidationError(
                param,
                f"{param} has {len(token_ids)} tokens, but the context is {self.max_model_len} tokens "
                "(the prompt must leave room for at least one generated token)",
            )
        self.check_token_ids(param, token_ids)

    def room(self, prompt_len: int) -> int:
        """How many tokens a prompt of ``prompt_len`` tokens leaves for generation."""
        return self.max_model_len - prompt_len

    def check_max_tokens(self, prompt_len: int, max_tokens: int | None, param: str = "max_tokens") -> None:
        room = self.room(prompt_len)
        if max_tokens is not None and max_tokens > room:
            raise RequestValidationError(
                param,
                f"{param} is {max_tokens}, but the prompt has {prompt_len} tokens and the context is "
                f"{self.max_model_len}: at most {room} tokens can be generated",
            )

    def check_params(self, params: SamplingParams, logprobs_param: str = "logprobs") -> None:
        """The sampling parameters that name token ids or logprob counts (``logprobs_param``: what the caller's
        API calls ``logprobs``, e.g. chat's ``top_logprobs``)."""
        self.check_token_ids("stop_token_ids", params.stop_token_ids)
        self.check_token_ids("logit_bias", params.logit_bias or ())
        self.check_token_ids("allowed_token_ids", params.allowed_token_ids or ())
        if params.use_beam_search:
            # Each beam reports its top K tokens, K = max(2, 1 + stop tokens) * n (the EOS counted as one).
            candidates = candidates_per_beam(params.n, len(params.stop_token_ids) + 1)
            if candidates > self.vocab_size:
                raise RequestValidationError(
                    "n", f"beam width n={params.n} needs {candidates} candidate tokens per beam, but the vocabulary "
                    f"has {self.vocab_size}",
                )  # fmt: skip
        for field, param in (("logprobs", logprobs_param), ("prompt_logprobs", "prompt_logprobs")):
            value = getattr(params, field)
            if value is not None and value > self.max_logprobs:
                raise RequestValidationError(
                    param, f"{param} is {value}, but this server returns at most {self.max_logprobs} logprobs"
                )

    def check_token_ids(self, param: str, token_ids: Iterable[int]) -> None:
        vocab = self.vocab_size
        for token_id in token_ids:
            if not 0 <= token_id < vocab:
                raise RequestValidationError(
                    param, f"{param} contains token id {token_id}, outside the vocabulary [0, {vocab})"
                )
