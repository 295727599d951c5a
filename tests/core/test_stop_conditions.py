from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_engine.core import FinishReason, Request
from paged_engine.core.stop_conditions import check_stop
from paged_engine.sampling_params import SamplingParams


def run(params: SamplingParams, tokens: list[int], eos: int | None = 2, prompt_len: int = 3, max_model_len: int = 64):
    request = Request("r", [9] * prompt_len, params, eos_token_id=eos)
    for token in tokens:
        request.all_token_ids.append(token)
        if check_stop(request, max_model_len):
            return request.num_output_tokens, request.finish_reason, request.stop_token_id
    return request.num_output_tokens, None, None


@pytest.mark.parametrize(
    ("params", "tokens", "eos", "expected"),
    [
        (SamplingParams(max_tokens=3), [5, 6, 7, 8], 2, (3, FinishReason.LENGTH, None)),
        (SamplingParams(max_tokens=9), [5, 2, 7], 2, (2, FinishReason.STOP, 2)),
        (SamplingParams(max_tokens=9), [5, 2, 7], None, (3, None, None)),  # no EOS known
        (SamplingParams(max_tokens=4, ignore_eos=True), [2, 2, 2, 2], 2, (4, FinishReason.LENGTH, None)),
        (SamplingParams(max_tokens=9, stop_token_ids=[7]), [5, 7], 2, (2, FinishReason.STOP, 7)),
        (SamplingParams(max_tokens=9, min_tokens=3), [2, 7, 2, 2], 2, (3, FinishReason.STOP, 2)),
        (SamplingParams(max_tokens=3, stop_token_ids=[8]), [5, 6, 8], 2, (3, FinishReason.STOP, 8)),  # stop wins
        (SamplingParams(max_tokens=None), [5] * 10, 2, (5, FinishReason.LENGTH, None)),  # max_model_len 8
    ],
)
def test_stop_conditions(params, tokens, eos, expected):
    assert run(params, tokens, eos, max_model_len=8 if params.max_tokens is None else 64) == expected


@given(
    tokens=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    min_tokens=st.integers(0, 10),
    max_tokens=st.integers(10, 20),
)
def test_never_stops_before_min_tokens_nor_after_max_tokens(tokens, min_tokens, max_tokens):
    params = SamplingParams(max_tokens=max_tokens, min_tokens=min_tokens, stop_token_ids=[3])
    produced, reason, _ = run(params, tokens, eos=2)
    if reason is FinishReason.STOP:
        assert produced >= min_tokens and tokens[produced - 1] in (2, 3)
    assert produced <= max_tokens
