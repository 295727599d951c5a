"""Arrival processes and SSE parsing."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from paged_platform.bench.arrivals import arrival_offsets
from paged_platform.bench.sse import DONE, StreamError, parse_line


def gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_infinite_rate_sends_everything_at_once() -> None:
    assert arrival_offsets(5, math.inf) == [0.0] * 5


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_the_requested_mean_and_dispersion(burstiness: float) -> None:
    offsets = arrival_offsets(20_000, rate=10.0, burstiness=burstiness, seed=1)
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    g = gaps(offsets)
    assert statistics.fmean(g) == pytest.approx(0.1, rel=0.05)
    # Gamma with shape k: coefficient of variation 1/sqrt(k) (Poisson: 1).
    assert statistics.stdev(g) / statistics.fmean(g) == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


def test_arrivals_are_deterministic_per_seed() -> None:
    assert arrival_offsets(10, 2.0, seed=3) == arrival_offsets(10, 2.0, seed=3)
    assert arrival_offsets(10, 2.0, seed=3) != arrival_offsets(10, 2.0, seed=4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_requests": -1, "rate": 1.0}, "number of requests must be >= 0, got -1"),
        ({"num_requests": 1, "rate": 0.0}, "request rate must be > 0"),
        ({"num_requests": 1, "rate": 1.0, "burstiness": 0.0}, "burstiness must be a finite number > 0, got 0.0"),
        ({"num_requests": 1, "rate": 1.0, "burstiness": math.inf}, "burstiness must be a finite number > 0, got inf"),
    ],
)
def test_arrivals_reject_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        arrival_offsets(**kwargs)


def test_sse_completion_chat_usage_and_done() -> None:
    event = parse_line('data: {"choices": [{"index": 0, "text": "Hello"}]}')
    assert event is not None and event.has_choices and event.text == "Hello" and event.usage is None
    event = parse_line('data: {"choices": [{"index": 0, "delta": {"content": " world"}}]}')
    assert event is not None and event.text == " world"
    event = parse_line('data: {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}')
    assert event is not None and event.has_choices and event.text == ""
    event = parse_line('data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}')
    assert event is not None and not event.has_choices and event.usage == {"prompt_tokens": 3, "completion_tokens": 7}
    assert parse_line("data: [DONE]") is DONE
    for line in ("", ": keep-alive", "event: message", "id: 4"):
        assert parse_line(line) is None


def test_sse_errors() -> None:
    with pytest.raises(StreamError, match="server error in stream: overloaded"):
        parse_line('data: {"error": {"message": "overloaded", "code": 503}}')
    with pytest.raises(StreamError, match="not JSON"):
        parse_line("data: {truncated")
    with pytest.raises(StreamError, match="not a JSON object"):
        parse_line("data: [1, 2]")
