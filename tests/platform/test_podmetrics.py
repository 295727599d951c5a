"""Summarising an engine's /metrics text for `paged-ctl top`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_platform.podmetrics import MetricsParseError, histogram_quantile, parse_pod_metrics

TEXT = """\
# HELP paged_kv_cache_usage_ratio used KV blocks / total blocks
# TYPE paged_kv_cache_usage_ratio gauge
paged_kv_cache_usage_ratio{model_name="m"} 0.5
# TYPE paged_requests_waiting gauge
paged_requests_waiting{model_name="m"} 2
# TYPE paged_preemptions_total counter
paged_preemptions_total{model_name="m"} 3
# TYPE paged_time_to_first_token_seconds histogram
paged_time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 50
paged_time_to_first_token_seconds_bucket{model_name="m",le="0.5"} 90
paged_time_to_first_token_seconds_bucket{model_name="m",le="1.0"} 100
paged_time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 100
paged_time_to_first_token_seconds_count{model_name="m"} 100
paged_time_to_first_token_seconds_sum{model_name="m"} 12.5
# TYPE paged_prefix_cache_queries_total counter
paged_prefix_cache_queries_total{model_name="m"} 0
"""


def test_parses_the_design_metric_names() -> None:
    m = parse_pod_metrics(TEXT)
    assert m.kv_cache_usage == 0.5 and m.requests_waiting == 2 and m.preemptions == 3
    # rank 95 of 100 lies in (0.5, 1.0] holding ranks 91..100: 0.5 + 0.5 * (95 - 90) / 10
    assert m.ttft_p95_seconds == pytest.approx(0.75)
    assert m.requests_running is None and m.max_num_seqs is None
    assert m.prefix_cache_hit_rate is None  # no queries yet: no rate, not 0


def test_label_sets_are_summed() -> None:
    text = 'paged_requests_running{model_name="a"} 2\npaged_requests_running{model_name="b"} 3\n'
    assert parse_pod_metrics(text).requests_running == 5


def test_rejects_non_prometheus_text() -> None:
    with pytest.raises(MetricsParseError):
        parse_pod_metrics("<html>502 Bad Gateway</html>")


def test_quantile_edges() -> None:
    assert histogram_quantile(0.95, []) is None
    assert histogram_quantile(0.5, [(1.0, 0), (float("inf"), 0)]) is None
    assert histogram_quantile(0.99, [(1.0, 1), (float("inf"), 10)]) == 1.0  # in +Inf: highest finite bound
    assert histogram_quantile(0.5, [(2.0, 10), (float("inf"), 10)]) == 1.0
    with pytest.raises(ValueError, match=r"quantile 1\.5"):
        histogram_quantile(1.5, [(1.0, 1)])


@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    q=st.floats(0, 1),
)
def test_quantile_is_monotone_and_bounded(counts: list[int], q: float) -> None:
    bounds = [0.1 * (i + 1) for i in range(len(counts))]
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    buckets = [*zip(bounds, map(float, cumulative), strict=True), (float("inf"), float(cumulative[-1]))]
    value = histogram_quantile(q, buckets)
    if cumulative[-1] == 0:
        assert value is None
        return
    assert value is not None and 0 <= value <= bounds[-1]
    higher = histogram_quantile(min(1.0, q + 0.1), buckets)
    assert higher is not None and higher >= value
