"""Summarise one engine replica's Prometheus ``/metrics`` text into the figures `paged-ctl top` shows.

Pure (text in, numbers out). Metric names are the DESIGN contract; label sets (``model_name``, ...) are summed,
since a replica serves one model.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from paged_platform.metric_names import (
    GENERATION_TOKENS,
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


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True)
class PodMetrics:
    """Instantaneous gauges and since-start counters of one replica; ``None`` where the replica exports nothing."""

    kv_cache_usage: float | None
    requests_running: float | None
    requests_waiting: float | None
    preemptions: float | None
    prefix_cache_hit_rate: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    ttft_p95_seconds: float | None
    max_num_seqs: float | None
    max_num_batched_tokens: float | None


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile`` on cumulative ``(upper bound, count)`` buckets; None without observations.

    Linear interpolation inside the bucket holding the rank; a rank in the +Inf bucket answers the highest finite
    bound, as Prometheus does.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            fraction = (rank - lower_count) / (count - lower_count)
            return min(bound, lower_bound + (bound - lower_bound) * fraction)
        lower_bound, lower_count = bound, count
    return lower_bound


def parse_pod_metrics(text: str) -> PodMetrics:
    """Summarise a replica's exposition text."""
    sums: dict[str, float] = defaultdict(float)
    buckets: dict[float, float] = defaultdict(float)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == f"{TTFT}_bucket":
                    buckets[float(sample.labels["le"])] += sample.value
                else:
                    sums[sample.name] += sample.value
    except (ValueError, KeyError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from None

    def get(name: str) -> float | None:
        return sums.get(name)

    queries, hits = get(PREFIX_QUERIES), get(PREFIX_HITS)
    return PodMetrics(
        kv_cache_usage=get(KV_USAGE),
        requests_running=get(RUNNING),
        requests_waiting=get(WAITING),
        preemptions=get(PREEMPTIONS),
        prefix_cache_hit_rate=hits / queries if queries and hits is not None else None,
        prompt_tokens=get(PROMPT_TOKENS),
        generation_tokens=get(GENERATION_TOKENS),
        ttft_p95_seconds=histogram_quantile(0.95, list(buckets.items())),
        max_num_seqs=get(MAX_NUM_SEQS),
        max_num_batched_tokens=get(MAX_NUM_BATCHED_TOKENS),
    )
