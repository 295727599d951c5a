"""Every metric name a dashboard or rule reads must exist where it comes from, so a rename can never silently
empty a panel or mute an alert: engine names in a real engine's /metrics, operator names in the operator's
registry (or in docs/observability.md's list of names the operator does not export yet). The recording rules
are then run by promtool over that real engine's series, so label sets and bucket bounds match too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.observability.conftest import run_tool
from tests.observability.sources import (
    RULES_DIR,
    exported_names,
    expressions,
    label_names,
    load_rules,
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
#: What the Kubernetes scrape would add to the live engine's series.
TARGET = {"namespace": "team-a", "pod": "engine-0", "job": "paged-engine", "instance": "10.0.0.7:8000"}


def _raw_names() -> dict[str, set[str]]:
    recorded = recorded_names()
    return {name: where for name, where in names_used().items() if name not in recorded}


def _engine_names_used() -> dict[str, set[str]]:
    return {
        name: where
        for name, where in _raw_names().items()
        if name.startswith("paged_") and not name.startswith(("paged_operator_", "paged_router_"))
    }


def test_names_fall_into_known_sources() -> None:
    """Every raw name is an engine name, an operator name or a Prometheus target series: nothing else is
    checked against a source."""
    for name, where in _raw_names().items():
        assert name.startswith("paged_") or name in PROMETHEUS_SYNTHETIC, f"{name} (used by {sorted(where)})"


def test_router_names_and_labels_exist_in_the_router() -> None:
    from paged_platform.router.metrics import RouterMetrics

    metrics = RouterMetrics()
    exported = exported_names(metrics.registry.collect())
    labels = {label for metric in vars(metrics).values() for label in getattr(metric, "_labelnames", ())}
    used = {name: where for name, where in _raw_names().items() if name.startswith("paged_router_")}
    assert used, "the fleet dashboard's router row reads no router series"
    missing = {name: sorted(where) for name, where in used.items() if name not in exported}
    assert not missing, f"router metric names used but not exported by the router: {missing}"
    for where, expr in expressions():
        if "paged_router_" in expr:
            unknown = label_names(expr) - labels - TARGET_LABELS
            assert not unknown, f"{where} matches or groups by labels the router's series lack: {unknown}"


def test_operator_names_exist_in_the_operator() -> None:
    from paged_operator import operator_metrics  # noqa: F401  registers the operator's metrics
    from prometheus_client import REGISTRY

    exported = exported_names(REGISTRY.collect())
    pending = pending_operator_names()
    used = {name: where for name, where in _raw_names().items() if name.startswith("paged_operator_")}
    missing = {name: sorted(where) for name, where in used.items() if name not in exported | pending}
    assert not missing, f"operator metric names used but neither exported nor listed as pending: {missing}"
    assert pending <= set(used), f"pending names no rule or dashboard uses: {pending - set(used)}"


@dataclass(frozen=True)
class Scrapes:
    """The engine's /metrics before and after a few requests, as (name, labels, value) samples."""

    before: list[Sample]
    after: list[Sample]


def _samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name.startswith("paged_")]


@pytest.fixture(scope="module")
def scrapes(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapes]:
    server = start_server(
        tiny_gemma_dir,
        tmp_path_factory.mktemp("engine"),
        *("--kv-cache-memory", "32MiB", "--block-size", "16", "--max-model-len", "256"),
    )
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            before = client.get("/metrics").text
            prompt = (
                "The paged KV cache keeps the keys and values of every request in fixed-size blocks, allocated on"
                " demand, shared between requests with a common prefix, and freed when the request finishes"
            )
            for suffix in ("", " or is preempted"):  # the second shares full blocks with the first: prefix hits
                body = {"model": MODEL_NAME, "prompt": prompt + suffix, "max_tokens": 4, "temperature": 0}
                assert client.post("/v1/completions", json=body).status_code == 200
            after = client.get("/metrics").text
    finally:
        server.stop()
    yield Scrapes(_samples(before), _samples(after))


@pytest.mark.gemma
@pytest.mark.server
def test_engine_names_exist_in_a_live_scrape(scrapes: Scrapes) -> None:
    scraped = {sample.name for sample in scrapes.after}
    assert {"paged_time_to_first_token_seconds_count", "paged_generation_tokens_total"} <= scraped
    engine_used = _engine_names_used()
    missing = {name: sorted(where) for name, where in engine_used.items() if name not in scraped}
    assert not missing, f"used by dashboards/rules but not in the engine's /metrics: {missing}"
    labelled = {s.name for s in scrapes.after if s.labels.get("model_name") == MODEL_NAME}
    unlabelled = {name for name in engine_used if name not in labelled}
    assert not unlabelled, f"engine series without model_name={MODEL_NAME!r}: {sorted(unlabelled)}"


@pytest.mark.gemma
@pytest.mark.server
def test_labels_used_on_engine_series_exist_in_a_live_scrape(scrapes: Scrapes) -> None:
    engine_used = _engine_names_used()
    engine_labels = {label for sample in scrapes.after for label in sample.labels}
    for where, expr in expressions():
        names = metric_names(expr)
        if names and names <= set(engine_used):
            unknown = label_names(expr) - engine_labels - TARGET_LABELS
            assert not unknown, f"{where} uses labels the engine does not export: {sorted(unknown)}"


def _series(name: str, labels: dict[str, str]) -> str:
    body = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted({**labels, **TARGET}.items()))
    return f"{name}{{{body}}}"


#: Recorded engine series that the live traffic must produce (a count of series with a sane value).
EXPECTED_RECORDED = {
    "paged:generation_tokens:rate5m > 0": 1,
    "paged:prompt_tokens:rate5m > 0": 1,
    "paged:prefix_cache_hit_ratio:rate5m > 0 <= 1": 1,
    "paged:preemptions:rate5m == 0": 1,
    "paged:time_to_first_token_seconds:p95_5m > 0": 1,
    "sum by (pod) (paged:time_to_first_token_seconds_bucket:rate5m) > 0": 1,
    "sum by (pod) (paged:inter_token_latency_seconds_bucket:rate5m) > 0": 1,
    "sum by (pod) (paged:e2e_request_latency_seconds_bucket:rate5m) > 0": 1,
    "sum by (pod) (paged:request_queue_time_seconds_bucket:rate5m) > 0": 1,
}


@pytest.mark.k8s
@pytest.mark.gemma
@pytest.mark.server
def test_recording_rules_produce_series_from_a_live_engine(scrapes: Scrapes, promtool: Path, tmp_path: Path) -> None:
    """The live engine's two scrapes become promtool input series 30 s apart (the counters rise between them);
    every engine recording rule must then yield its series, with the labels the dashboards and alerts join on."""
    engine_rules = {r["record"] for path in RULES_DIR.glob("engine*.yaml") for r in load_rules(path) if "record" in r}
    checked = {name for expr in EXPECTED_RECORDED for name in metric_names(expr)}
    assert engine_rules == checked, f"engine recording rules without a live check: {sorted(engine_rules - checked)}"
    before = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in scrapes.before}
    input_series = []
    for sample in scrapes.after:
        first = before.get((sample.name, tuple(sorted(sample.labels.items()))), sample.value)
        input_series.append({"series": _series(sample.name, sample.labels), "values": f"{first} {sample.value}x4"})
    tests = {
        "rule_files": [str(path) for path in sorted(RULES_DIR.glob("engine*.yaml"))],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": input_series,
                "promql_expr_test": [
                    {"expr": f"count({expr})", "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": count}]}
                    for expr, count in EXPECTED_RECORDED.items()
                ],
            }
        ],
    }
    path = tmp_path / "live.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    run_tool(promtool, "test", "rules", path)
