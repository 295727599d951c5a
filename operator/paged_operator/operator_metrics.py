"""The operator's own metrics (Prometheus): reconciles, errors, durations, desired replicas, decisions by reason.

Liveness is kopf's own ``--liveness`` endpoint (it answers while the operator's event loop runs); this
module only exposes ``/metrics`` on a separate port. Label values are bounded: decisions are counted by
kind and arbiter rule (R1–R6, see ``arbiter``), never by free-text reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from paged_platform.api.spec import ModelDeploymentSpec
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter(
    "paged_operator_reconciles_total", "Reconciles of ModelDeployments, by handler and result", ["handler", "result"]
)
RECONCILE_ERRORS = Counter(
    "paged_operator_reconcile_errors_total", "Failed reconciles, by handler and kind of error", ["handler", "error"]
)
RECONCILE_DURATION = Histogram(
    "paged_operator_reconcile_duration_seconds",
    "Time to reconcile one ModelDeployment, by handler",
    ["handler"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
DESIRED_REPLICAS = Gauge(
    "paged_operator_desired_replicas", "Replica count the operator set, per ModelDeployment", ["namespace", "name"]
)
READY_REPLICAS = Gauge(
    "paged_operator_ready_replicas",
    "Ready replicas of the child Deployment, per ModelDeployment",
    ["namespace", "name"],
)
MAX_REPLICAS = Gauge(
    "paged_operator_max_replicas",
    "spec.replicas.max, only while the autoscaler may change the count (the at-max alert compares against it)",
    ["namespace", "name"],
)
TTFT_SLO = Gauge(
    "paged_operator_ttft_slo_seconds",
    "The TTFT p95 objective of a ModelDeployment, labelled with its served model name to join engine metrics",
    ["namespace", "name", "model_name"],
)
DECISIONS = Counter(
    "paged_operator_decisions_total",
    "Scaling and budget decisions applied, by kind and arbiter rule",
    ["kind", "rule", "dry_run"],
)
API_REQUESTS = Counter(
    "paged_operator_api_requests_total",
    "Requests the operator's own client sent to the API server (kopf's watches are not counted), by verb and resource",
    ["verb", "resource"],
)
LEADER = Gauge(
    "paged_operator_leader", "1 while this replica holds the operator's Lease and acts, 0 while it stands by"
)
SCRAPE_FAILURES = Counter(
    "paged_operator_scrape_failures_total", "Ready engine pods that did not answer a metrics scrape", ["namespace"]
)


@contextmanager
def timed(handler: str) -> Iterator[None]:
    """Count and time one reconcile; an exception counts as an error of its type and propagates."""
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        RECONCILES.labels(handler, "error").inc()
        RECONCILE_ERRORS.labels(handler, type(exc).__name__).inc()
        raise
    else:
        RECONCILES.labels(handler, "success").inc()
    finally:
        RECONCILE_DURATION.labels(handler).observe(time.perf_counter() - start)


def observe_fleet(namespace: str, name: str, spec: ModelDeploymentSpec, desired: int, ready: int) -> None:
    """The per-ModelDeployment gauges the fleet dashboard and the alerts read."""
    DESIRED_REPLICAS.labels(namespace, name).set(desired)
    READY_REPLICAS.labels(namespace, name).set(ready)
    if spec.autoscaling.enabled and spec.replicas.max > spec.replicas.min:
        MAX_REPLICAS.labels(namespace, name).set(spec.replicas.max)
    else:
        with suppress(KeyError):
            MAX_REPLICAS.remove(namespace, name)
    _forget_slo(namespace, name)
    slo = spec.autoscaling.targets.ttft_p95_seconds
    if slo is not None:
        TTFT_SLO.labels(namespace, name, spec.model.resolved_served_name).set(slo)


def _forget_slo(namespace: str, name: str) -> None:
    for labels in [s.labels for metric in TTFT_SLO.collect() for s in metric.samples]:
        if labels["namespace"] == namespace and labels["name"] == name:
            TTFT_SLO.remove(namespace, name, labels["model_name"])


def forget(namespace: str, name: str) -> None:
    """Drop a deleted ModelDeployment's gauges so they do not report stale values forever."""
    for gauge in (DESIRED_REPLICAS, READY_REPLICAS, MAX_REPLICAS):
        with suppress(KeyError):
            gauge.remove(namespace, name)
    _forget_slo(namespace, name)


def serve_metrics(port: int, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` from a daemon thread (prometheus_client's own server)."""
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port must be in 0..65535, got {port}")
    start_http_server(port, addr=addr, registry=registry)
