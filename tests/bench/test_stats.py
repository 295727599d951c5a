"""Statistics on a known synthetic timeline: every figure computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_platform.bench.stats import SLO, Distribution, RequestResult, percentile, summarize

# Four requests over a 10 s run (seconds): ttft, latency, output tokens, ITL gaps.
TIMELINE = [
    RequestResult(ok=True, prompt_tokens=100, output_tokens=11, ttft=0.1, latency=1.1, itl=(0.1,) * 10),
    RequestResult(ok=True, prompt_tokens=200, output_tokens=21, ttft=0.2, latency=4.2, itl=(0.2,) * 20),
    RequestResult(ok=True, prompt_tokens=300, output_tokens=1, ttft=0.3, latency=0.3),
    RequestResult(ok=True, prompt_tokens=400, output_tokens=5, ttft=1.0, latency=3.0, itl=(0.5,) * 4),
    RequestResult(ok=False, error="HTTP 503"),
    RequestResult(ok=False, error="HTTP 503"),
    RequestResult(ok=False, error="timeout"),
]


def test_counts_and_throughput() -> None:
    s = summarize(TIMELINE, duration=10.0, cancelled=2)
    assert (s.completed, s.failed, s.cancelled) == (4, 3, 2)
    assert (s.prompt_tokens, s.output_tokens) == (1000, 38)
    assert s.request_throughput == pytest.approx(0.4)
    assert s.output_throughput == pytest.approx(3.8)
    assert s.total_token_throughput == pytest.approx(103.8)
    assert s.errors == {"HTTP 503": 2, "timeout": 1}
    assert s.goodput is None and s.good_requests is None


def test_latency_distributions_in_ms() -> None:
    s = summarize(TIMELINE, duration=10.0)
    # TTFT 100, 200, 300, 1000 ms: median interpolates 200..300, p90 at rank 2.7, p99 at rank 2.97.
    assert s.ttft.count == 4
    assert s.ttft.mean == pytest.approx(400.0)
    assert s.ttft.median == pytest.approx(250.0)
    assert s.ttft.p90 == pytest.approx(300 + 0.7 * 700)
    assert s.ttft.p99 == pytest.approx(300 + 0.97 * 700)
    # TPOT only where there is more than one token: (1.1-0.1)/10, (4.2-0.2)/20, (3.0-1.0)/4.
    assert s.tpot.count == 3
    assert s.tpot.mean == pytest.approx((100 + 200 + 500) / 3)
    assert s.tpot.median == pytest.approx(200.0)
    # ITL: all 34 gaps pooled: ten of 100 ms, twenty of 200 ms, four of 500 ms.
    assert s.itl.count == 34
    assert s.itl.mean == pytest.approx((10 * 100 + 20 * 200 + 4 * 500) / 34)
    assert s.itl.median == pytest.approx(200.0)
    assert s.itl.p99 == pytest.approx(500.0)
    assert s.e2el.mean == pytest.approx((1100 + 4200 + 300 + 3000) / 4)
    assert s.e2el.p90 == pytest.approx(3000 + 0.7 * 1200)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    # TTFT <= 250 ms keeps requests 1 and 2; TPOT <= 150 ms then drops request 2 (200 ms/token).
    s = summarize(TIMELINE, duration=10.0, slo=SLO(ttft=0.25, tpot=0.15))
    assert s.good_requests == 1
    assert s.goodput == pytest.approx(0.1)
    # A single-token request has no TPOT: only its TTFT is judged (request 3 meets 300 ms).
    s = summarize(TIMELINE, duration=10.0, slo=SLO(ttft=0.3, tpot=0.15))
    assert s.good_requests == 2
    # End-to-end SLO alone: 1.1 s, 0.3 s pass 2 s; failed requests never count.
    s = summarize(TIMELINE, duration=10.0, slo=SLO(e2el=2.0))
    assert s.good_requests == 2 and s.goodput == pytest.approx(0.2)


def test_goodput_boundaries_are_inclusive() -> None:
    request = RequestResult(ok=True, output_tokens=3, ttft=0.5, latency=1.5)
    assert SLO(ttft=0.5, tpot=0.5, e2el=1.5).met_by(request)
    assert not SLO(ttft=0.4999).met_by(request)


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan])
def test_slo_rejects_non_positive(value: float) -> None:
    with pytest.raises(ValueError, match="SLO ttft must be > 0"):
        SLO(ttft=value)


def test_bad_duration_and_percentile() -> None:
    with pytest.raises(ValueError, match="duration must be > 0 seconds, got 0"):
        summarize(TIMELINE, duration=0.0)
    with pytest.raises(ValueError, match="within \\[0, 100\\], got 101"):
        percentile([1.0], 101)


def test_empty_distribution_is_nan() -> None:
    d = Distribution.of([])
    assert d.count == 0 and math.isnan(d.mean) and math.isnan(d.p99)
    s = summarize([RequestResult(ok=False, error="x")], duration=1.0)
    assert s.completed == 0 and math.isnan(s.ttft.median)


@settings(deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def test_json_report_writes_empty_distributions_as_null(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from paged_platform.bench.report import write_json

    summary = summarize([RequestResult(ok=False, error="HTTP 500")], duration=2.0, slo=SLO(ttft=1.0))
    path = tmp_path / "r.json"
    write_json(path, summary, {"dataset": "random"})
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["metadata"] == {"dataset": "random"}
    assert data["ttft"] == {"count": 0, "mean": None, "median": None, "p90": None, "p99": None}
    assert (data["failed"], data["errors"], data["good_requests"], data["goodput"]) == (1, {"HTTP 500": 1}, 0, 0.0)
