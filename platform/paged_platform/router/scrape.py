"""The load a replica reports in its ``/metrics`` text, reduced to what routing needs (pure).

Only the lines of the two gauges are parsed (``prometheus_text.parse`` with ``names``: an engine's exposition is
mostly histogram buckets). The ``model_name`` labels of those gauges say which models the replica serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_platform.metric_names import KV_USAGE, WAITING
from paged_platform.prometheus_text import parse


@dataclass(frozen=True)
class ReplicaLoad:
    models: frozenset[str]
    waiting: float
    kv_usage: float


def parse_load(text: str) -> ReplicaLoad:
    """Waiting requests (summed over models) and the highest KV usage; raises ``MetricsError`` (a ValueError) on
    malformed lines of those gauges."""
    samples = parse(text, names=(WAITING, KV_USAGE))
    models = frozenset(s.labels["model_name"] for s in samples if "model_name" in s.labels)
    waiting = sum((s.value for s in samples if s.name == WAITING), 0.0)
    kv_usage = max([0.0, *(s.value for s in samples if s.name == KV_USAGE)])
    return ReplicaLoad(models, waiting, kv_usage)
