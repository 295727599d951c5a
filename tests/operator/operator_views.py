"""Small builders for fleet views in policy tests."""

from __future__ import annotations

from paged_operator.policy.fleet_view import FleetView


def view(
    *,
    ready: int = 2,
    reporting: int | None = None,
    kv: float = 0.5,
    waiting: float = 0.0,
    preempt: float | None = 0.0,
    arrival: float | None = None,
    completion: float | None = None,
    ttft: float | None = None,
    itl: float | None = None,
    degraded: bool = False,
    t: float = 0.0,
) -> FleetView:
    """A fleet view with per-replica values as given (``reporting`` defaults to all ready pods)."""
    reporting = ready if reporting is None else reporting
    return FleetView(
        time=t,
        ready=ready,
        reporting=reporting,
        kv_usage_mean=kv,
        kv_usage_max=kv,
        running_per_replica=8.0,
        seq_budget_usage=None,
        waiting_per_replica=waiting,
        waiting_median=waiting,
        waiting_total=waiting * reporting,
        preemption_rate_per_replica=preempt,
        completion_rate_per_replica=completion,
        completion_rate_peak=completion,
        arrival_rate_per_replica=arrival,
        prefix_hit_rate=None,
        ttft_p95_s=ttft,
        itl_p95_s=itl,
        degraded=degraded,
    )
