"""The router's own Prometheus series (``paged_router_*``, label ``model_name``), on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from paged_platform.metric_names import ROUTER_ARRIVALS, ROUTER_QUEUE_DEPTH

disable_created_metrics()  # the *_created series only double the scrape size

COLD_START_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
QUEUE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.arrivals = Counter(
            ROUTER_ARRIVALS.removesuffix("_total"),  # prometheus_client adds the suffix
            "Requests received, whatever became of them (with the queue depth, the demand the operator reads to "
            "scale a ModelDeployment from and to zero)",
            ["model_name"],
            registry=r,
        )
        self.cold_starts = Histogram(
            "paged_router_cold_start_seconds",
            "From the arrival of a request that found no ready replica to the first byte of its response: what "
            "a client waits while a fleet scales from zero",
            ["model_name"],
            buckets=COLD_START_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "paged_router_requests",
            "Requests sent to a replica, by replica and by the policy's reason for choosing it",
            ["model_name", "replica", "reason"],
            registry=r,
        )
        self.rejected = Counter(
            "paged_router_rejected_requests",
            "Requests the router answered itself with an error, by reason "
            "(queue_full, queue_timeout, upstream_unavailable, unknown_model, bad_request, client_gone)",
            ["model_name", "reason"],
            registry=r,
        )
        self.stream_errors = Counter(
            "paged_router_stream_errors",
            "Responses cut off after their first byte because the replica failed mid-stream",
            ["model_name", "replica"],
            registry=r,
        )
        self.retries = Counter(
            "paged_router_retries",
            "Requests sent again to another replica before the first byte, by the first replica's failure",
            ["model_name", "reason"],
            registry=r,
        )
        self.queue_time = Histogram(
            "paged_router_queue_time_seconds",
            "Time a request waited for a replica with room (about zero when one had room at once)",
            ["model_name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            ROUTER_QUEUE_DEPTH,
            "Requests waiting for a replica with room (demand while a fleet scales from zero)",
            ["model_name"],
            registry=r,
        )
        self.in_flight = Gauge(
            "paged_router_in_flight_requests", "Requests in flight, by replica", ["model_name", "replica"], registry=r
        )
        self.prefix_queries = Counter(
            "paged_router_prefix_queries",
            "Prompt chunks routed (the router's estimated-prefix-hit denominator, in chunks of characters)",
            ["model_name"],
            registry=r,
        )
        self.prefix_hits = Counter(
            "paged_router_prefix_hits",
            "Prompt chunks the chosen replica was believed to hold (estimated prefix hit = hits / queries)",
            ["model_name"],
            registry=r,
        )
        self.replicas = Gauge("paged_router_replicas", "Known replicas, by readiness", ["state"], registry=r)

    def forget_replica(self, url: str) -> None:
        """Drop a departed replica's series, so replicas that come and go (rollouts) do not pile up series."""
        for metric in (self.requests, self.stream_errors, self.in_flight):
            metric.remove_by_labels({"replica": url})
