"""Every metric name a dashboard or rule reads must exist where it comes from, so a rename can never silently
empty a panel or mute an alert: engine names in a real engine's /metrics, operator names in the operator's
registry (or in docs/observability.md's list of names the operator does not export yet)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.observability.sources import (
    exported_names,
    expressions,
    label_names,
    metric_names,
    names_used,
    pending_operator_names,
    recorded_names,
)
from tests.server.conftest import MODEL_NAME, start_server

#: Series Prometheus itself makes for each scrape target.
PROMETHEUS_SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
#: Labels Prometheus' scrape configuration adds to engine series (Kubernetes service discovery), and ``le``.
TARGET_LABELS = frozenset({"namespace", "pod", "job", "instance", "le"})


def _raw_names() -> dict[str, set[str]]:
    recorded = recorded_names()
    return {name: where for name, where in names_used().items() if name not in recorded}


def test_names_fall_into_known_sources() -> None:
    """Every raw name is an engine name, an operator name or a Prometheus target series: nothing else is
    checked against a source."""
    for name, where in _raw_names().items():
        assert name.startswith("paged_") or name in PROMETHEUS_SYNTHETIC, f"{name} (used by {sorted(where)})"


def test_operator_names_exist_in_the_operator() -> None:
    from paged_operator import health  # noqa: F401  (registers the operator's metrics)
    from prometheus_client import REGISTRY

    exported = exported_names(REGISTRY.collect())
    pending = pending_operator_names()
    used = {name: where for name, where in _raw_names().items() if name.startswith("paged_operator_")}
    missing = {name: sorted(where) for name, where in used.items() if name not in exported | pending}
    assert not missing, f"operator metric names used but neither exported nor listed as pending: {missing}"
    assert pending <= set(used), f"pending names no rule or dashboard uses: {pending - set(used)}"


@pytest.mark.server
def test_engine_names_exist_in_a_live_scrape(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(
        tiny_gemma_dir, tmp_path, "--kv-cache-memory", "32MiB", "--block-size", "16", "--max-model-len", "256"
    )
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for prompt in ("The paged KV cache", "The paged KV cache keeps"):  # the second hits the prefix cache
                body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 4, "temperature": 0}
                assert client.post("/v1/completions", json=body).status_code == 200
            text = client.get("/metrics").text
    finally:
        server.stop()
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(text))
    scraped = {sample.name for family in families for sample in family.samples}
    assert {"paged_time_to_first_token_seconds_count", "paged_generation_tokens_total"} <= scraped
    engine_used = {
        name: where
        for name, where in _raw_names().items()
        if name.startswith("paged_") and not name.startswith("paged_operator_")
    }
    missing = {name: sorted(where) for name, where in engine_used.items() if name not in scraped}
    assert not missing, f"used by dashboards/rules but not in the engine's /metrics: {missing}"
    labelled = {s.name for f in families for s in f.samples if s.labels.get("model_name") == MODEL_NAME}
    unlabelled = {name for name in engine_used if name not in labelled}
    assert not unlabelled, f"engine series without model_name={MODEL_NAME!r}: {sorted(unlabelled)}"
    engine_labels = {label for f in families if f.name.startswith("paged_") for s in f.samples for label in s.labels}
    for where, expr in expressions():
        names = metric_names(expr)
        if names and all(name in engine_used for name in names):
            unknown = label_names(expr) - engine_labels - TARGET_LABELS
            assert not unknown, f"{where} uses labels the engine does not export: {sorted(unknown)}"
