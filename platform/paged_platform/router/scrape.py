"""The load a replica reports in its ``/metrics`` text, reduced to what routing needs (pure).

Only the lines of the two gauges are parsed (an engine's exposition is mostly histogram buckets), with the
Prometheus parser, so label escaping and exponents are handled as Prometheus does. The ``model_name`` labels
of those gauges say which models the replica serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from paged_platform.metric_names import KV_USAGE, WAITING


@dataclass(frozen=True)
class ReplicaLoad:
    models: frozenset[str]
    waiting: float
    kv_usage: float


def parse_load(text: str) -> ReplicaLoad:
    """Waiting requests (summed over models) and the highest KV usage; raises ValueError on malformed lines."""
    lines = [line for line in text.splitlines() if line.startswith((WAITING, KV_USAGE))]
    models: set[str] = set()
    waiting, kv_usage = 0.0, 0.0
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if "model_name" in sample.labels:
                models.add(sample.labels["model_name"])
            if sample.name == WAITING:
                waiting += sample.value
            elif sample.name == KV_USAGE:
                kv_usage = max(kv_usage, sample.value)
    return ReplicaLoad(frozenset(models), waiting, kv_usage)
