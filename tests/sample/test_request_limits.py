"""Model-dependent limits: every token-id field, the context and the logprobs limit, each refused with the field,
the value and the limit named, and the edges accepted."""

from __future__ import annotations

import pytest
from paged_engine.core import RequestValidationError
from paged_engine.request_limits import RequestLimits
from paged_engine.sampling_params import SamplingParams

LIMITS = RequestLimits(vocab_size=100, max_model_len=64, max_logprobs=5)


@pytest.mark.parametrize(
    ("prompt", "kwargs", "param", "message"),
    [
        ([1, 2], {"stop_token_ids": [7, 100]}, "stop_token_ids", r"token id 100, outside the vocabulary \[0, 100\)"),
        ([1, 2], {"logit_bias": {-1: 1.0}}, "logit_bias", r"token id -1, outside the vocabulary \[0, 100\)"),
        ([1, 2], {"allowed_token_ids": [3, 250]}, "allowed_token_ids", r"token id 250, outside"),
        ([1, 100], {}, "prompt", r"prompt contains token id 100, outside the vocabulary \[0, 100\)"),
        ([], {}, "prompt", "prompt is empty"),
        (list(range(64)), {}, "prompt", "prompt has 64 tokens, but the context is 64 tokens"),
        ([1] * 60, {"max_tokens": 5}, "max_tokens", "max_tokens is 5, but the prompt has 60 tokens .* at most 4"),
        ([1, 2], {"logprobs": 6}, "logprobs", "logprobs is 6, but this server returns at most 5 logprobs"),
        ([1, 2], {"prompt_logprobs": 6}, "prompt_logprobs", "prompt_logprobs is 6, .* at most 5"),
        (
            [1, 2],
            {"n": 51, "temperature": 0.0, "use_beam_search": True},
            "n",
            "beam width n=51 needs 102 candidate tokens per beam, but the vocabulary has 100",
        ),
    ],
)
def test_a_request_outside_the_model_is_refused(prompt: list[int], kwargs: dict, param: str, message: str):
    with pytest.raises(RequestValidationError, match=message) as info:
        LIMITS.check(prompt, SamplingParams(**kwargs))
    assert info.value.param == param


def test_the_edges_are_accepted():
    params = SamplingParams(
        max_tokens=1, stop_token_ids=[0, 99], logit_bias={99: 1.0}, allowed_token_ids=[0], logprobs=5,
        prompt_logprobs=5,
    )  # fmt: skip
    LIMITS.check([0] * 63, params)
    LIMITS.check([99], SamplingParams(max_tokens=None))  # None: up to the context


def test_the_prompt_field_is_named_as_the_caller_calls_it():
    with pytest.raises(RequestValidationError, match="messages has 70 tokens") as info:
        LIMITS.check([1] * 70, SamplingParams(), prompt_param="messages")
    assert info.value.param == "messages"
