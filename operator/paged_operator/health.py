"""The operator's own metrics (Prometheus): reconciles, errors, durations, desired replicas, decisions by reason.

Liveness is kopf's own ``--liveness`` endpoint (it answers while the operator's event loop runs); this
module only exposes ``/metrics`` on a separate port. Label values are bounded: decisions are counted by
kind and arbiter rule (R1–R6, see ``arbiter``), never by free-text reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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
DECISIONS = Counter(
    "paged_operator_decisions_total",
    "Scaling and budget decisions applied, by kind and arbiter rule",
    ["kind", "rule", "dry_run"],
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


def forget(namespace: str, name: str) -> None:
    """Drop a deleted ModelDeployment's gauge so it does not report a stale count forever."""
    with suppress(KeyError):
        DESIRED_REPLICAS.remove(namespace, name)


def serve_metrics(port: int, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` from a daemon thread (prometheus_client's own server)."""
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port must be in 0..65535, got {port}")
    start_http_server(port, addr=addr, registry=registry)
