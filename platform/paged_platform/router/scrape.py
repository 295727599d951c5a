"""The load a replica reports in its ``/metrics`` text, reduced to what routing needs (pure).

Only the lines of three series are parsed (``prometheus_text.parse`` with ``names``: an engine's exposition is
mostly histogram buckets). The models a replica serves are its ``paged_served_model_info`` series, one per model
name (the base model and each LoRA adapter loaded now), whose ``model_name`` label is the base model. An engine
older than that series serves only its base model: the ``model_name`` labels of the two gauges then say which.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_platform.metric_names import KV_USAGE, SERVED_MODEL_INFO, SERVED_MODEL_LABEL, WAITING
from paged_platform.prometheus_text import parse


@dataclass(frozen=True)
class ReplicaLoad:
    #: Every model name a request may give to reach this replica: base models and adapters.
    models: frozenset[str]
    #: The base models among them (where a request that names no model, like ``/tokenize``'s, goes).
    base_models: frozenset[str]
    waiting: float
    kv_usage: float


def parse_load(text: str) -> ReplicaLoad:
    """Served models, waiting requests (summed over models) and the highest KV usage; raises ``MetricsError`` (a
    ValueError) on malformed lines of those series."""
    samples = parse(text, names=(WAITING, KV_USAGE, SERVED_MODEL_INFO))
    bases = frozenset(s.labels["model_name"] for s in samples if "model_name" in s.labels)
    served = [s.labels for s in samples if s.name == SERVED_MODEL_INFO and s.value > 0]
    models = frozenset(labels[SERVED_MODEL_LABEL] for labels in served if SERVED_MODEL_LABEL in labels)
    waiting = sum((s.value for s in samples if s.name == WAITING), 0.0)
    kv_usage = max([0.0, *(s.value for s in samples if s.name == KV_USAGE)])
    return ReplicaLoad(models or bases, bases, waiting, kv_usage)
