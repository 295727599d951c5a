"""Parsing engine metrics, counter/histogram arithmetic over windows, and the fleet view."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from operator_exposition import exposition
from paged_operator.policy.engine_series import parse_exposition
from paged_operator.policy.fleet_view import (
    EngineSample,
    SampleWindow,
    counter_increase,
    fleet_view,
    histogram_increase,
)
from paged_platform.engine_contract.budgets import BudgetLimits
from paged_platform.prometheus_text import Histogram, MetricsError

MODEL = "gemma-3-270m"


def test_parses_a_realistic_page() -> None:
    s = parse_exposition(
        exposition(kv=0.82, running=12, waiting=3, preemptions=7, max_num_seqs=48, max_num_batched_tokens=4096),
        pod="md-abc",
        time=100.0,
        model_name=MODEL,
    )
    assert (s.pod, s.time, s.kv_usage, s.running, s.waiting, s.preemptions_total) == ("md-abc", 100.0, 0.82, 12, 3, 7)
    assert (s.prefix_queries_total, s.prefix_hits_total) == (1000.0, 250.0)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (52000.0, 16000.0)
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (48, 4096)
    assert s.ttft is not None and s.ttft.count == 10
    assert s.ttft.buckets[0] == (0.05, 1.0) and math.isinf(s.ttft.buckets[-1][0])
    assert s.itl is not None and s.itl.count == 100
    assert s.limits is None  # this page reports no live limits


def test_the_live_limits_an_engine_reports_are_read_and_checked() -> None:
    page = exposition(max_num_seqs=48, limits=BudgetLimits(300, 40000))
    assert parse_exposition(page, pod="p", time=0.0).limits == BudgetLimits(300, 40000)
    line = f'paged_scheduler_max_num_seqs_limit{{model_name="{MODEL}"}}'
    broken = page.replace(f"{line} 300.0", f"{line} 0.0")
    with pytest.raises(MetricsError, match=r"pod p: max_num_seqs_limit must be in \[1, 4096\], got 0"):
        parse_exposition(broken, pod="p", time=0.0)


def test_model_name_filter_and_summing() -> None:
    two = exposition(kv=0.4, waiting=2, model="a") + exposition(kv=0.7, waiting=5, model="b").split("\n", 3)[3]
    both = parse_exposition(two, pod="p", time=1.0)
    assert both.waiting == 7 and both.kv_usage == 0.7  # queues add up, the KV pool is the fullest
    only_a = parse_exposition(two, pod="p", time=1.0, model_name="a")
    assert only_a.waiting == 2 and only_a.kv_usage == 0.4


def test_missing_required_series_is_named() -> None:
    text = "\n".join(line for line in exposition().splitlines() if "paged_requests_waiting" not in line)
    with pytest.raises(MetricsError, match="paged_requests_waiting"):
        parse_exposition(text, pod="p", time=1.0)
    with pytest.raises(MetricsError, match="required metrics missing"):
        parse_exposition(exposition(model="other"), pod="p", time=1.0, model_name=MODEL)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("paged_kv_cache_usage_ratio{model_name= 1\n", "unparseable"),
        (exposition(kv=1.5), "must be in \\[0, 1\\], got 1.5"),
        (exposition(kv=float("nan")), "paged_kv_cache_usage_ratio is NaN"),
        (exposition().replace("paged_requests_waiting{", "paged_requests_waiting_x{"), "paged_requests_waiting"),
        (exposition(waiting=-1), "paged_requests_waiting must be a finite non-negative number, got -1.0"),
        (exposition().replace('le="0.1"', 'le="fast"'), "non-numeric le='fast'"),
    ],
)
def test_bad_pages_raise_metrics_error(text: str, match: str) -> None:
    with pytest.raises(MetricsError, match=match):
        parse_exposition(text, pod="p", time=1.0)


def test_counter_increase_handles_resets() -> None:
    assert counter_increase([10, 15, 20]) == 10
    assert counter_increase([10, 15, 3, 5]) == 5 + 3 + 2  # restart at 15 → 3: the 3 happened after the restart
    assert counter_increase([4]) == 0


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_counter_increase_is_never_negative(values: list[float]) -> None:
    assert counter_increase(values) >= 0


def _hist(*counts: float) -> Histogram:
    return Histogram(tuple(zip((0.1, 0.5, 1.0, math.inf), counts, strict=True)))


def test_histogram_increase_over_window_with_reset() -> None:
    hists = [_hist(10, 20, 30, 30), _hist(12, 25, 40, 40), _hist(1, 1, 2, 2)]  # pod restarted before the third
    total = histogram_increase(hists)
    assert total == _hist(2 + 1, 5 + 1, 10 + 2, 10 + 2)
    assert histogram_increase(hists[:1]) is None


def sample(pod: str, t: float, **kw: float) -> EngineSample:
    return replace(EngineSample(time=t, pod=pod, kv_usage=0.5, running=4.0, waiting=0.0, preemptions_total=0.0), **kw)


def test_window_forgets_old_samples_and_gone_pods() -> None:
    w = SampleWindow(horizon_s=30).add([sample("a", 0), sample("b", 0)], now=0)
    w = w.add([sample("a", 20)], now=20)
    w = w.add([sample("a", 40)], now=40)
    assert [s.time for s in w.series["a"]] == [20, 40]
    assert "b" not in w.series
    assert w.add([sample("a", 40, waiting=9)], now=41).series["a"][-1].waiting == 0  # a repeat is ignored
    with pytest.raises(ValueError, match="horizon must be positive"):
        SampleWindow(horizon_s=0)


def test_fleet_view_means_rates_and_quantiles() -> None:
    w = SampleWindow(horizon_s=60)
    t0 = [
        sample("a", 0, preemptions_total=100, kv_usage=0.9),
        sample("b", 0, preemptions_total=5, kv_usage=0.5),
    ]
    w = w.add(t0, now=0)
    first = fleet_view(w, t0, ready=3, now=0, rate_window_s=30)
    assert first is not None and first.preemption_rate_per_replica is None  # one sample: no rate yet
    t1 = [
        sample("a", 10, preemptions_total=120, kv_usage=0.9, waiting=6),
        sample("b", 10, preemptions_total=2, kv_usage=0.5, waiting=2),  # b restarted: its 2 count
    ]
    w = w.add(t1, now=10)
    v = fleet_view(w, t1, ready=3, now=10, rate_window_s=30)
    assert v is not None
    assert (v.ready, v.reporting, v.degraded) == (3, 2, False)
    assert v.kv_usage_mean == pytest.approx(0.7) and v.kv_usage_max == 0.9
    assert v.waiting_per_replica == 4 and v.waiting_total == 8
    assert v.preemption_rate_per_replica == pytest.approx((20 / 10 + 2 / 10) / 2)
    assert fleet_view(w, [], ready=3, now=10, rate_window_s=30) is None


def test_fleet_view_ttft_p95_from_bucket_deltas_across_pods() -> None:
    def text(counts: tuple[int, ...]) -> str:
        return exposition(ttft_counts=counts)

    w = SampleWindow(horizon_s=60)
    old = [parse_exposition(text((0, 0, 0, 0, 0, 0, 0, 0)), pod=p, time=0) for p in "ab"]
    w = w.add(old, now=0)
    # In the window: a saw 10 fast first tokens, b saw 10 slow ones (1–2.5 s).
    new = [
        parse_exposition(text((10, 10, 10, 10, 10, 10, 10, 10)), pod="a", time=10),
        parse_exposition(text((0, 0, 0, 0, 0, 10, 10, 10)), pod="b", time=10),
    ]
    w = w.add(new, now=10)
    v = fleet_view(w, new, ready=2, now=10, rate_window_s=30)
    assert v is not None and v.ttft_p95_s == pytest.approx(1.0 + 1.5 * (19 - 10) / 10)
    assert v.itl_p95_s is None  # ITL buckets did not move: no observations in the window, no quantile
    assert v.prefix_hit_rate is None  # counters did not move


def test_fleet_view_degraded_and_argument_checks() -> None:
    w = SampleWindow(horizon_s=30).add([sample("a", 0)], now=0)
    v = fleet_view(w, [sample("a", 0)], ready=3, now=0, rate_window_s=30, min_reporting_fraction=0.5)
    assert v is not None and v.degraded and v.reporting_fraction == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="rate window must be in"):
        fleet_view(w, [sample("a", 0)], ready=1, now=0, rate_window_s=31)
    with pytest.raises(ValueError, match="min_reporting_fraction must be in"):
        fleet_view(w, [sample("a", 0)], ready=1, now=0, rate_window_s=30, min_reporting_fraction=0)


def test_finished_requests_sum_served_reasons() -> None:
    # stop 90 + length 10; the 7 aborted (clients gone while queued) were not served
    assert parse_exposition(exposition(), pod="p", time=1.0).finished_total == 100


def test_arrival_and_completion_rates_from_the_last_interval() -> None:
    w = SampleWindow(horizon_s=60)
    rounds = [
        # a: finished 0 → 20 → 60 while its queue (waiting + running) grew 10 → 30 → 40
        [sample("a", 0, finished_total=0, waiting=2, running=8), sample("b", 0, finished_total=0)],
        [sample("a", 10, finished_total=20, waiting=10, running=20), sample("b", 10, finished_total=10)],
        [sample("a", 20, finished_total=60, waiting=10, running=30), sample("b", 20, finished_total=30)],
    ]
    for r in rounds:
        w = w.add(r, now=r[0].time)
    v = fleet_view(w, rounds[-1], ready=2, now=20, rate_window_s=30)
    assert v is not None
    assert v.completion_rate_peak == pytest.approx(4.0) and v.completion_rate_per_replica == pytest.approx(3.0)
    # a: (40 finished + 10 more queued) / 10 s = 5/s; b: 20 / 10 s = 2/s
    assert v.arrival_rate_per_replica == pytest.approx(3.5)


def test_fleet_arrivals_for_new_and_silent_pods() -> None:
    w = SampleWindow(horizon_s=60)
    w = w.add([sample("a", 0, finished_total=0)], now=0)
    current = [sample("a", 10, finished_total=40), sample("new", 10, finished_total=0)]
    w = w.add(current, now=10)
    # "new" has no rate: its traffic went to "a" in the last interval, so the fleet gets 4/s, not 8/s.
    v = fleet_view(w, current, ready=2, now=10, rate_window_s=30)
    assert v is not None and v.arrival_rate_per_replica == pytest.approx(4.0 / 2)
    # A silent third pod is assumed as busy as "a".
    v = fleet_view(w, current, ready=3, now=10, rate_window_s=30)
    assert v is not None and v.arrival_rate_per_replica == pytest.approx(8.0 / 3)


def test_waiting_median_and_budget_usage() -> None:
    w = SampleWindow(horizon_s=60)
    current = [
        sample("a", 0, waiting=300, running=36, max_num_seqs=36),
        sample("b", 0, waiting=0, running=9, max_num_seqs=36),
        sample("c", 0, waiting=2, running=18),  # reports no budget
    ]
    w = w.add(current, now=0)
    v = fleet_view(w, current, ready=3, now=0, rate_window_s=30)
    assert v is not None and v.waiting_median == 2 and v.waiting_per_replica == pytest.approx(302 / 3)
    assert v.seq_budget_usage == pytest.approx((1.0 + 0.25) / 2)  # median of the two pods with a budget
