"""The one exposition parser and ``histogram_quantile`` every paged reader uses: samples as written, the name
filter, histograms from ``_bucket`` series, and PromQL's quantile rules with their edges."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_platform.prometheus_text import (
    Histogram,
    MetricsError,
    Sample,
    bucket_bound,
    histogram_of,
    histogram_quantile,
    parse,
)

INF = math.inf


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(sample: Sample) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels.items())
    return f"{sample.name}{{{labels}}} {sample.value!r}" if labels else f"{sample.name} {sample.value!r}"


names = st.sampled_from(["paged_requests_waiting", "paged_kv_cache_usage_ratio", "other_total", "x_bucket"])
label_sets = st.dictionaries(
    st.sampled_from(["model_name", "le", "phase"]), st.text(st.characters(codec="utf-8"), max_size=8), max_size=3
)
samples = st.builds(Sample, names, label_sets, st.floats(allow_nan=False, allow_infinity=True))


@given(st.lists(samples, max_size=12))
def test_samples_come_back_as_written(written: list[Sample]) -> None:
    """Label escaping, exponents and infinities round-trip; order and duplicates are kept."""
    text = "# HELP other_total A counter.\n" + "".join(_line(s) + "\n" for s in written)
    assert parse(text) == written


@given(st.lists(samples, max_size=12), st.sets(names, max_size=2))
def test_the_name_filter_keeps_exactly_those_series(written: list[Sample], wanted: set[str]) -> None:
    text = "".join(_line(s) + "\n" for s in written)
    assert parse(text, names=wanted) == [s for s in written if s.name in wanted]


def test_the_name_filter_skips_other_lines_but_not_similar_names() -> None:
    text = (
        '# TYPE paged_requests_waiting gauge\npaged_requests_waiting{model_name="a"} 2\n'
        'paged_requests_waiting_seconds{model_name="a"} 9\nbroken_line{le= 1\n'
    )
    assert parse(text, names=("paged_requests_waiting",)) == [Sample("paged_requests_waiting", {"model_name": "a"}, 2)]
    with pytest.raises(MetricsError, match="unparseable metrics exposition"):
        parse(text)  # the whole page is checked without a filter


@pytest.mark.parametrize("text", ["<html>502 Bad Gateway</html>", 'x{model_name="a" 1\n', "x one\n"])
def test_text_that_is_not_the_format_is_a_metrics_error(text: str) -> None:
    with pytest.raises(MetricsError):
        parse(text)


def test_bucket_bounds() -> None:
    assert bucket_bound("x_bucket", {"le": "+Inf"}) == INF and bucket_bound("x_bucket", {"le": "0.25"}) == 0.25
    for labels, message in [({}, "without an 'le' label"), ({"le": "fast"}, "non-numeric le='fast'"),
                            ({"le": "NaN"}, "le=NaN")]:  # fmt: skip
        with pytest.raises(MetricsError, match=message):
            bucket_bound("x_bucket", labels)


def test_histogram_of_sums_label_sets_per_bound() -> None:
    text = """\
ttft_bucket{model_name="a",le="0.5"} 1
ttft_bucket{model_name="a",le="+Inf"} 2
ttft_bucket{model_name="b",le="+Inf"} 3
ttft_bucket{model_name="b",le="0.5"} 3
ttft_count{model_name="a"} 2
itl_bucket{le="+Inf"} 7
"""
    assert histogram_of(parse(text), "ttft") == Histogram(((0.5, 4.0), (INF, 5.0)))
    assert histogram_of(parse(text), "e2e") is None
    with pytest.raises(MetricsError, match=r"\+Inf bucket"):
        histogram_of(parse('ttft_bucket{le="1"} 1\n'), "ttft")


def test_histogram_validation() -> None:
    with pytest.raises(MetricsError, match=r"\+Inf bucket"):
        Histogram(((0.1, 1.0),))
    with pytest.raises(MetricsError, match="strictly increasing"):
        Histogram(((0.5, 1.0), (0.1, 2.0), (INF, 3.0)))
    with pytest.raises(MetricsError, match="strictly increasing"):
        Histogram(((0.5, 1.0), (0.5, 2.0), (INF, 3.0)))


def hist(*pairs: tuple[float, float]) -> Histogram:
    return Histogram(pairs)


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    h = hist((0.1, 50), (0.5, 90), (1.0, 100), (INF, 100))
    assert histogram_quantile(0.5, h) == pytest.approx(0.1)
    assert histogram_quantile(0.7, h) == pytest.approx(0.1 + 0.4 * (70 - 50) / 40)
    assert histogram_quantile(0.95, h) == pytest.approx(0.5 + 0.5 * 0.5)
    assert histogram_quantile(1.0, h) == 1.0


def test_quantile_edges() -> None:
    # The lowest bucket interpolates from 0 when its bound is positive, and answers its bound when it is not.
    assert histogram_quantile(0.5, hist((2.0, 10), (INF, 10))) == 1.0
    assert histogram_quantile(0.5, hist((-1.0, 10), (2.0, 10), (INF, 10))) == -1.0
    assert histogram_quantile(0.5, hist((0.0, 10), (INF, 10))) == 0.0
    # A rank in the +Inf bucket: the highest finite bound.
    assert histogram_quantile(0.99, hist((1.0, 1), (INF, 10))) == 1.0
    assert histogram_quantile(0.5, hist((0.1, 0), (1.0, 0), (INF, 10))) == 1.0
    # No observations, or no finite bucket: nothing to say.
    assert histogram_quantile(0.95, hist((1.0, 0), (INF, 0))) is None
    assert histogram_quantile(0.95, hist((INF, 10))) is None
    # q = 0: the lower bound of the first bucket holding an observation (Prometheus divides 0 by 0 there).
    assert histogram_quantile(0.0, hist((0.1, 0), (0.5, 0), (1.0, 4), (INF, 4))) == 0.5
    assert histogram_quantile(0.0, hist((0.1, 3), (INF, 4))) == 0.0
    assert histogram_quantile(0.0, hist((0.1, 0), (INF, 4))) == 0.1


def test_counts_that_go_down_are_raised_to_the_count_below_as_prometheus_does() -> None:
    # (1.0, 5) then (2.0, 3): read as (2.0, 5); rank 6 of 10 falls in (2, 3] holding ranks 6..8.
    assert histogram_quantile(0.6, hist((1.0, 5), (2.0, 3), (3.0, 8), (INF, 10))) == pytest.approx(2.0 + 1 / 3)


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_quantile_outside_zero_to_one_is_a_caller_bug(q: float) -> None:
    with pytest.raises(ValueError, match="quantile must be in"):
        histogram_quantile(q, hist((1.0, 1), (INF, 1)))


def _prometheus_bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """PromQL's classic-histogram rules written out step by step, as the oracle (NaN where PromQL answers NaN)."""
    counts, peak = [], -INF
    for bound, count in buckets:
        peak = max(peak, count)
        counts.append((bound, peak))
    total = counts[-1][1]
    if len(counts) < 2 or total == 0:
        return math.nan
    rank = q * total
    below = [i for i in range(len(counts) - 1) if counts[i][1] >= rank]
    if not below:
        return counts[-2][0]
    b = below[0]
    if b == 0 and counts[0][0] <= 0:
        return counts[0][0]
    start, before = counts[b - 1] if b > 0 else (0.0, 0.0)
    in_bucket = counts[b][1] - before
    return start + (counts[b][0] - start) * ((rank - before) / in_bucket) if in_bucket else math.nan


bucket_lists = st.lists(
    st.tuples(st.floats(-5, 5, allow_nan=False), st.integers(0, 50)), min_size=1, max_size=8, unique_by=lambda b: b[0]
).map(lambda bs: [*sorted((b, float(c)) for b, c in bs), (INF, float(sum(c for _, c in bs)))])


@given(bucket_lists, st.floats(0, 1).filter(lambda q: q > 0))
def test_quantile_matches_promql_wherever_promql_gives_a_number(buckets: list[tuple[float, float]], q: float) -> None:
    expected = _prometheus_bucket_quantile(q, buckets)
    got = histogram_quantile(q, Histogram(tuple(buckets)))
    if math.isnan(expected):
        assert got is None
    else:
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    q=st.floats(0, 1),
)
def test_quantile_is_monotone_and_bounded(counts: list[int], q: float) -> None:
    bounds = [0.1 * (i + 1) for i in range(len(counts))]
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    h = Histogram((*zip(bounds, map(float, cumulative), strict=True), (INF, float(cumulative[-1]))))
    value = histogram_quantile(q, h)
    if cumulative[-1] == 0:
        assert value is None
        return
    assert value is not None and 0 <= value <= bounds[-1]
    higher = histogram_quantile(min(1.0, q + 0.1), h)
    assert higher is not None and higher >= value
