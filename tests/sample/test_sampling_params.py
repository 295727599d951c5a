"""Bad sampling parameters are refused with the parameter and its limit named."""

from __future__ import annotations

import pytest
from paged_engine.sampling_params import MAX_LOGPROBS, SamplingParams, SamplingParamsError, StructuredOutputParams


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        ({"n": 0}, "n", "n must be at least 1, got 0"),
        ({"temperature": -0.1}, "temperature", "non-negative, got -0.1"),
        ({"top_p": 0.0}, "top_p", r"top_p must be in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, "top_p", r"top_p must be in \(0, 1\], got 1.5"),
        ({"top_k": -2}, "top_k", "-1 \\(disabled\\) or at least 1, got -2"),
        ({"min_p": 1.1}, "min_p", r"\[0, 1\], got 1.1"),
        ({"presence_penalty": 2.5}, "presence_penalty", r"\[-2, 2\], got 2.5"),
        ({"frequency_penalty": -3.0}, "frequency_penalty", r"\[-2, 2\], got -3.0"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "positive, got 0.0"),
        ({"max_tokens": 0}, "max_tokens", "at least 1, got 0"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens", r"min_tokens \(5\) must not exceed max_tokens \(4\)"),
        ({"logprobs": -1}, "logprobs", "non-negative, got -1"),
        ({"prompt_logprobs": -1}, "prompt_logprobs", "non-negative, got -1"),
        ({"seed": 2**64}, "seed", rf"seed must be in \[{-(2**63)}, {2**64 - 1}\], got {2**64}"),
        ({"logit_bias": {5: 101.0}}, "logit_bias", r"token 5 must be in \[-100, 100\], got 101.0"),
        ({"allowed_token_ids": []}, "allowed_token_ids", "must not be empty"),
        # A grammar may end before min_tokens (found by the long fuzz: GrammarViolation, a 500).
        (
            {"min_tokens": 4, "structured_output": StructuredOutputParams(regex="[ab]{2,5}")},
            "min_tokens",
            "min_tokens cannot be combined with structured output",
        ),
    ],
)
def test_malformed_parameter_is_refused(kwargs: dict, param: str, message: str):
    with pytest.raises(SamplingParamsError, match=message) as info:
        SamplingParams(**kwargs)
    assert info.value.param == param


def test_edges_are_accepted():
    SamplingParams(temperature=0.0, top_p=1.0, top_k=-1, min_p=1.0, presence_penalty=-2.0, frequency_penalty=2.0)
    SamplingParams(top_k=0, logprobs=0, prompt_logprobs=MAX_LOGPROBS, min_tokens=16, max_tokens=16)
    SamplingParams(logit_bias={0: -100.0}, allowed_token_ids=[0], seed=-(2**63))
    SamplingParams(seed=2**64 - 1)
