"""Engine metrics as the operator's policies see them: samples, rates, windows and the fleet view.

Pure (no I/O): the metrics source hands in ``EngineSample``s (``engine_series`` reads them from exposition
text or query results), the policies read a ``FleetView``.

Why a window of raw samples instead of pre-computed rates: counters are only meaningful as
increases between samples of the *same* pod (a restarted pod resets them), and a histogram
quantile over a window needs the bucket counts at both ends of the window, exactly like
Prometheus' ``increase()`` and ``histogram_quantile()``.
"""

from __future__ import annotations

import functools
import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from paged_platform.engine_contract.budgets import BudgetLimits
from paged_platform.prometheus_text import Histogram, histogram_quantile


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
    limits: BudgetLimits | None = None  # the live budgets' limits (None: the engine does not report them)


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
    ``budget_limits``: what every answering pod accepts live (the meet of their reported limits; None when none
    reports them): a budget pushed to the fleet must lie within it.
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
    budget_limits: BudgetLimits | None = None

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
        budget_limits=_meet([s.limits for s in current if s.limits is not None]),
    )


def _meet(limits: Sequence[BudgetLimits]) -> BudgetLimits | None:
    return functools.reduce(BudgetLimits.meet, limits) if limits else None


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
