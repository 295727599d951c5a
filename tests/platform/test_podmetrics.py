"""Summarising an engine's /metrics text for `paged-ctl top`."""

from __future__ import annotations

import pytest
from paged_platform.podmetrics import parse_pod_metrics
from paged_platform.prometheus_text import MetricsError

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
    with pytest.raises(MetricsError):
        parse_pod_metrics("<html>502 Bad Gateway</html>")
