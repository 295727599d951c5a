"""The engine series the operator reads, folded into one ``EngineSample`` per pod: from a pod's exposition text
(``PodScraper``) or from a Prometheus server's query results (``PrometheusSource``), with the same rules.

Pure. Metric names are the contract in ``paged_platform.metric_names``; text parsing and histograms are
``paged_platform.prometheus_text``'s. Invariant: a sample is built only when every ``REQUIRED`` series is present
and in range; anything else is a ``MetricsError`` naming the pod, so one bad pod never fails a decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from paged_platform.engine_contract.budgets import BudgetLimits, SettingError
from paged_platform.metric_names import (
    FINISHED,
    GENERATION_TOKENS,
    ITL,
    KV_USAGE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_BATCHED_TOKENS_LIMIT,
    MAX_NUM_SEQS,
    MAX_NUM_SEQS_LIMIT,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    RUNNING,
    TTFT,
    WAITING,
)
from paged_platform.prometheus_text import Histogram, MetricsError, bucket_bound, parse

from paged_operator.policy.fleet_view import EngineSample

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
    MAX_NUM_SEQS_LIMIT,
    MAX_NUM_BATCHED_TOKENS_LIMIT,
)
HISTOGRAM_SERIES = (TTFT, ITL)


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
        for s in parse(text):
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
        le = bucket_bound(name, labels)
        per_bound = buckets.setdefault(name.removesuffix("_bucket"), {})
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
        return Histogram.from_counts(per_bound) if per_bound else None

    def as_int(name: str) -> int | None:
        value = scalars.get(name)
        return None if value is None else round(value)

    def limits() -> BudgetLimits | None:
        seqs, tokens = as_int(MAX_NUM_SEQS_LIMIT), as_int(MAX_NUM_BATCHED_TOKENS_LIMIT)
        if seqs is None or tokens is None:
            return None
        try:
            return BudgetLimits(seqs, tokens)
        except SettingError as exc:
            raise MetricsError(f"pod {pod}: {exc}") from None

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
        limits=limits(),
    )
