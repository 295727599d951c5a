"""Summarise one engine replica's Prometheus ``/metrics`` text into the figures `paged-ctl top` shows.

Pure (text in, numbers out). Metric names are the DESIGN contract; label sets (``model_name``, ...) are summed,
since a replica serves one model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

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
from paged_platform.prometheus_text import histogram_of, histogram_quantile, parse


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


def parse_pod_metrics(text: str) -> PodMetrics:
    """Summarise a replica's exposition text; ``MetricsError`` when it is not the exposition format."""
    samples = parse(text)
    sums: dict[str, float] = defaultdict(float)
    for sample in samples:
        sums[sample.name] += sample.value
    ttft = histogram_of(samples, TTFT)

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
        ttft_p95_seconds=histogram_quantile(0.95, ttft) if ttft is not None else None,
        max_num_seqs=get(MAX_NUM_SEQS),
        max_num_batched_tokens=get(MAX_NUM_BATCHED_TOKENS),
    )
