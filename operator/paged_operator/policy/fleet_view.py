"""Engine metrics as the operator's policies see them: parsing, rates, windows and the fleet view.

Pure (no I/O): the scraper hands in exposition text or query results, the policies read a
``FleetView``. Metric names are the contract in ``DESIGN.md``; nothing here invents new ones.

Why a window of raw samples instead of pre-computed rates: counters are only meaningful as
increases between samples of the *same* pod (a restarted pod resets them), and a histogram
quantile over a window needs the bucket counts at both ends of the window, exactly like
Prometheus' ``increase()`` and ``histogram_quantile()``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from paged_platform.metric_names import (
    FINISHED,
    GENERATION_TOKENS,
    ITL,
    KV_USAGE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    RUNNING,
    TTFT,
    WAITING,
)
from prometheus_client.parser import text_string_to_metric_families

#: Series an engine must expose for the autoscaler to use its sample at all.
REQUIRED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS)
#: Plain (gauge or counter) series read into ``EngineSample``.
SCALAR_SERIES = (
    *REQUIRED,
    PREFIX_QUERIES,
    PREFIX_HITS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    FINISHED,
    MAX_NUM_SEQS,
    MAX_NUM_BATCHED_TOKENS,
)
HISTOGRAM_SERIES = (TTFT, ITL)


class MetricsError(ValueError):
    """An engine's metrics cannot be used (unparseable text or a required series missing)."""


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: ``(upper_bound, cumulative_count)`` pairs, sorted, ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.buckets or not math.isinf(self.buckets[-1][0]):
            raise MetricsError(f"histogram needs a +Inf bucket, got bounds {[b for b, _ in self.buckets]}")
        bounds = [b for b, _ in self.buckets]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise MetricsError(f"histogram bucket bounds must be strictly increasing, got {bounds}")

    @property
    def count(self) -> float:
        return self.buckets[-1][1]

    def minus(self, earlier: Histogram) -> Histogram:
        """Bucket increases since ``earlier``; a reset (any bucket went down) means the pod restarted."""
        if [b for b, _ in earlier.buckets] != [b for b, _ in self.buckets]:
            raise MetricsError("cannot subtract histograms with different bucket bounds")
        if any(now < before for (_, now), (_, before) in zip(self.buckets, earlier.buckets, strict=True)):
            return self
        return Histogram(
            tuple((b, now - before) for (b, now), (_, before) in zip(self.buckets, earlier.buckets, strict=True))
        )

    def plus(self, other: Histogram) -> Histogram:
        if [b for b, _ in other.buckets] != [b for b, _ in self.buckets]:
            raise MetricsError("cannot add histograms with different bucket bounds")
        return Histogram(tuple((b, x + y) for (b, x), (_, y) in zip(self.buckets, other.buckets, strict=True)))


def histogram_quantile(q: float, hist: Histogram) -> float | None:
    """The ``q``-quantile by linear interpolation inside the bucket, as Prometheus does; None without observations.

    A quantile falling in the +Inf bucket returns the highest finite bound (the best lower estimate).
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    total = hist.count
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulative in hist.buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower_bound
            in_bucket = cumulative - lower_count
            if in_bucket <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / in_bucket
        lower_bound, lower_count = bound, cumulative
    return lower_bound


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one engine pod. ``time`` is in seconds on the operator's clock (wall time)."""

    time: float
    pod: str
    kv_usage: float
    running: float
    waiting: float
    preemptions_total: float
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    finished_total: float | None = None  # served requests: every finished_reason except "abort"
    ttft: Histogram | None = None
    itl: Histogram | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


def _matches(labels: Mapping[str, str], model_name: str | None) -> bool:
    return model_name is None or labels.get("model_name") == model_name


def parse_exposition(text: str, *, pod: str, time: float, model_name: str | None = None) -> EngineSample:
    """Parse Prometheus text exposition from one engine into an ``EngineSample``.

    With ``model_name`` only series carrying that label count. Several matching series of one name
    (an engine serving several models) are summed, except KV usage, which is one pool per engine and
    takes the maximum.
    """
    scalars: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"pod {pod}: unparseable metrics exposition: {exc}") from exc
    try:
        for family in families:
            for s in family.samples:
                if _matches(s.labels, model_name):
                    add_series(scalars, buckets, s.name, s.labels, s.value)
    except MetricsError as exc:
        raise MetricsError(f"pod {pod}: {exc}") from exc
    return sample_from_series(scalars, buckets, pod=pod, time=time)


def add_series(
    scalars: dict[str, float],
    buckets: dict[str, dict[float, float]],
    name: str,
    labels: Mapping[str, str],
    value: float,
) -> None:
    """Fold one series value into the per-name accumulators; names the operator does not use are ignored.

    Aborted requests (``finished_reason="abort"``, mostly clients giving up while queued) are not
    counted as finished: they were not served, and completions measure what a replica serves.
    """
    if name == FINISHED and labels.get("finished_reason") == "abort":
        return
    used = name in SCALAR_SERIES or name.removesuffix("_bucket") in HISTOGRAM_SERIES
    if used and math.isnan(value):
        raise MetricsError(f"{name} is NaN")
    if name in SCALAR_SERIES:
        # KV usage is one block pool per engine: several series (models) mean the fullest one counts.
        scalars[name] = max(scalars.get(name, 0.0), value) if name == KV_USAGE else scalars.get(name, 0.0) + value
    elif name.endswith("_bucket") and name.removesuffix("_bucket") in HISTOGRAM_SERIES:
        if "le" not in labels:
            raise MetricsError(f"histogram bucket {name} without an 'le' label")
        per_bound = buckets.setdefault(name.removesuffix("_bucket"), {})
        try:
            le = float(labels["le"])
        except ValueError as exc:
            raise MetricsError(f"histogram bucket {name} has a non-numeric le={labels['le']!r}") from exc
        per_bound[le] = per_bound.get(le, 0.0) + value


def sample_from_series(
    scalars: Mapping[str, float], buckets: Mapping[str, Mapping[float, float]], *, pod: str, time: float
) -> EngineSample:
    """Build a sample from series values keyed by metric name (shared by the exposition and Prometheus sources)."""
    missing = [name for name in REQUIRED if name not in scalars]
    if missing:
        raise MetricsError(f"pod {pod}: required metrics missing: {', '.join(missing)}")
    kv = scalars[KV_USAGE]
    if not 0.0 <= kv <= 1.0:  # also false for NaN
        raise MetricsError(f"pod {pod}: {KV_USAGE} must be in [0, 1], got {kv}")
    for name in (RUNNING, WAITING, PREEMPTIONS):
        if not 0.0 <= scalars[name] < math.inf:
            raise MetricsError(f"pod {pod}: {name} must be a finite non-negative number, got {scalars[name]}")

    def hist(name: str) -> Histogram | None:
        per_bound = buckets.get(name)
        return Histogram(tuple(sorted(per_bound.items()))) if per_bound else None

    def as_int(name: str) -> int | None:
        value = scalars.get(name)
        return None if value is None else round(value)

    return EngineSample(
        time=time,
        pod=pod,
        kv_usage=kv,
        running=scalars[RUNNING],
        waiting=scalars[WAITING],
        preemptions_total=scalars[PREEMPTIONS],
        prefix_queries_total=scalars.get(PREFIX_QUERIES),
        prefix_hits_total=scalars.get(PREFIX_HITS),
        prompt_tokens_total=scalars.get(PROMPT_TOKENS),
        generation_tokens_total=scalars.get(GENERATION_TOKENS),
        finished_total=scalars.get(FINISHED),
        ttft=hist(TTFT),
        itl=hist(ITL),
        max_num_seqs=as_int(MAX_NUM_SEQS),
        max_num_batched_tokens=as_int(MAX_NUM_BATCHED_TOKENS),
    )


def counter_increase(values: Sequence[float]) -> float:
    """Increase of a counter over consecutive readings; a drop means a restart from zero (like ``increase()``)."""
    total = 0.0
    for before, now in itertools.pairwise(values):
        total += now - before if now >= before else now
    return total


def histogram_increase(hists: Sequence[Histogram]) -> Histogram | None:
    """Bucket increases over consecutive readings, reset-aware; None with fewer than two readings."""
    if len(hists) < 2:
        return None
    total: Histogram | None = None
    for before, now in itertools.pairwise(hists):
        part = now.minus(before)
        total = part if total is None else total.plus(part)
    return total


@dataclass(frozen=True)
class SampleWindow:
    """Recent samples per pod, oldest first, kept for ``horizon_s`` seconds. Immutable: ``add`` returns a new one."""

    horizon_s: float
    series: Mapping[str, tuple[EngineSample, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.horizon_s > 0:
            raise ValueError(f"sample window horizon must be positive, got {self.horizon_s} s")

    def add(self, samples: Iterable[EngineSample], now: float) -> SampleWindow:
        """Append this round's samples and forget anything older than the horizon (gone pods disappear too).

        A sample not newer than the pod's last one (a repeated answer, a wall-clock step back) is
        ignored: rates need time to advance, and a decision must not fail over one odd timestamp.
        """
        merged: dict[str, list[EngineSample]] = {pod: list(s) for pod, s in self.series.items()}
        for sample in samples:
            history = merged.setdefault(sample.pod, [])
            if not history or sample.time > history[-1].time:
                history.append(sample)
        cutoff = now - self.horizon_s
        kept = {pod: tuple(s for s in hist if s.time >= cutoff) for pod, hist in merged.items()}
        return SampleWindow(self.horizon_s, {pod: hist for pod, hist in kept.items() if hist})

    def since(self, pod: str, start: float) -> tuple[EngineSample, ...]:
        return tuple(s for s in self.series.get(pod, ()) if s.time >= start)


@dataclass(frozen=True)
class FleetView:
    """What the policies decide on: one model's fleet at one instant.

    Per-replica figures are means over the pods that *answered* (a silent pod is not a pod with zero
    load); ``ready`` is how many pods Kubernetes reports ready, so ``per_replica × ready`` estimates
    the whole fleet. Rates are per second per replica over ``rate_window_s``; None when no pod has
    two samples in the window yet. Latency quantiles are in seconds over the same window.
    ``completion_rate_per_replica`` is finished requests per second (mean), ``completion_rate_peak``
    that of the fastest pod: the best estimate of what one saturated replica serves (a pod that just
    started or has little work completes less than it could). ``arrival_rate_per_replica``
    estimates requests arriving per second as completions plus the growth of the pod's queue
    (waiting + running): unlike the queue length, it does not keep growing while a backlog builds
    up, so it says how much capacity is missing, not how long it has been missing; it is the fleet's
    arrival rate divided by ``ready`` (see ``_fleet_arrivals`` for new and silent pods). Both are
    taken over each pod's last scrape interval, since the split of traffic changes when pods come and go.
    ``waiting_median`` is the typical pod's queue: a backlog stuck on one pod is not one that more
    replicas can work off (queued requests do not move between engines).
    ``seq_budget_usage`` is running sequences over ``max_num_seqs`` (median of the pods that report
    their budget): the scheduler's other capacity limit besides KV blocks. The median, because one
    pod working off its own stuck queue runs a full batch without saying anything about the fleet.
    ``degraded``: fewer pods answered than the collection settings require; decisions on this view
    must not scale down (a partial view can hide load, not invent it).
    """

    time: float
    ready: int
    reporting: int
    kv_usage_mean: float
    kv_usage_max: float
    running_per_replica: float
    seq_budget_usage: float | None
    waiting_per_replica: float
    waiting_median: float
    waiting_total: float
    preemption_rate_per_replica: float | None
    completion_rate_per_replica: float | None
    completion_rate_peak: float | None
    arrival_rate_per_replica: float | None
    prefix_hit_rate: float | None
    ttft_p95_s: float | None
    itl_p95_s: float | None
    degraded: bool = False
    budgets: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)

    @property
    def reporting_fraction(self) -> float:
        return self.reporting / self.ready if self.ready else 0.0


def is_degraded(reporting: int, ready: int, min_reporting_fraction: float) -> bool:
    """Too few of the ready pods answered for a trustworthy view."""
    if not 0.0 < min_reporting_fraction <= 1.0:
        raise ValueError(f"min_reporting_fraction must be in (0, 1], got {min_reporting_fraction}")
    return ready > 0 and reporting < min_reporting_fraction * ready


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def fleet_view(
    window: SampleWindow,
    current: Sequence[EngineSample],
    *,
    ready: int,
    now: float,
    rate_window_s: float,
    min_reporting_fraction: float = 0.5,
) -> FleetView | None:
    """Aggregate this round's samples (``current``, already added to ``window``); None when no pod answered."""
    if ready < 0:
        raise ValueError(f"ready replicas must be non-negative, got {ready}")
    if not rate_window_s > 0 or rate_window_s > window.horizon_s:
        raise ValueError(f"rate window must be in (0, {window.horizon_s}] s (the sample horizon), got {rate_window_s}")
    if not current:
        return None
    start = now - rate_window_s
    preempt_rates: list[float] = []
    completion_rates: list[float] = []
    arrival_rates: list[float] = []
    prefix_queries = prefix_hits = 0.0
    ttft: Histogram | None = None
    itl: Histogram | None = None
    for sample in current:
        history = window.since(sample.pod, start)
        if len(history) < 2:
            continue
        elapsed = history[-1].time - history[0].time
        preempt_rates.append(counter_increase([s.preemptions_total for s in history]) / elapsed)
        before, last = history[-2], history[-1]
        if before.finished_total is not None and last.finished_total is not None:
            # Over the last interval only: the split of traffic changes whenever pods come and go.
            span = last.time - before.time
            done = counter_increase([before.finished_total, last.finished_total])
            queued = (last.waiting + last.running) - (before.waiting + before.running)
            completion_rates.append(done / span)
            arrival_rates.append(max(0.0, done + queued) / span)
        queries = [s.prefix_queries_total for s in history if s.prefix_queries_total is not None]
        hits = [s.prefix_hits_total for s in history if s.prefix_hits_total is not None]
        if len(queries) == len(hits) == len(history):
            prefix_queries += counter_increase(queries)
            prefix_hits += counter_increase(hits)
        ttft = _merge(ttft, _window_histogram([s.ttft for s in history]))
        itl = _merge(itl, _window_histogram([s.itl for s in history]))
    waiting = [s.waiting for s in current]
    slots = [min(1.0, s.running / s.max_num_seqs) for s in current if s.max_num_seqs]
    return FleetView(
        time=now,
        ready=ready,
        reporting=len(current),
        kv_usage_mean=_mean([s.kv_usage for s in current]),
        kv_usage_max=max(s.kv_usage for s in current),
        running_per_replica=_mean([s.running for s in current]),
        seq_budget_usage=statistics.median(slots) if slots else None,
        waiting_per_replica=_mean(waiting),
        waiting_median=statistics.median(waiting),
        waiting_total=sum(waiting),
        preemption_rate_per_replica=_mean(preempt_rates) if preempt_rates else None,
        completion_rate_per_replica=_mean(completion_rates) if completion_rates else None,
        completion_rate_peak=max(completion_rates, default=None),
        arrival_rate_per_replica=_fleet_arrivals(arrival_rates, ready=ready, answered=len(current)),
        prefix_hit_rate=prefix_hits / prefix_queries if prefix_queries > 0 else None,
        ttft_p95_s=histogram_quantile(0.95, ttft) if ttft is not None else None,
        itl_p95_s=histogram_quantile(0.95, itl) if itl is not None else None,
        degraded=is_degraded(len(current), ready, min_reporting_fraction),
        budgets={s.pod: (s.max_num_seqs, s.max_num_batched_tokens) for s in current},
    )


def _fleet_arrivals(rates: Sequence[float], *, ready: int, answered: int) -> float | None:
    """Fleet arrival rate per ready replica from the pods with a rate.

    A pod that answered without a rate yet has just become ready: in the last interval its share of
    traffic went to the others, so it adds nothing. A pod that did not answer is assumed as busy as
    the average of those that did (missing is not idle).
    """
    if not rates or ready == 0:
        return None
    silent = max(0, ready - answered)
    return sum(rates) * (len(rates) + silent) / len(rates) / ready


def _window_histogram(hists: Sequence[Histogram | None]) -> Histogram | None:
    present = [h for h in hists if h is not None]
    return histogram_increase(present) if len(present) == len(hists) else None


def _merge(total: Histogram | None, part: Histogram | None) -> Histogram | None:
    """Sum per-pod histograms; pods with other bucket layouts (mid-upgrade) are left out rather than failing."""
    if part is None:
        return total
    if total is None:
        return part
    if [b for b, _ in total.buckets] != [b for b, _ in part.buckets]:
        return total
    return total.plus(part)
