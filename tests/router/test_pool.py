"""The replica pool's bookkeeping: leases count in-flight requests, and a replica that leaves takes its metric
series with it once its last request has ended."""

from __future__ import annotations

import aiohttp
from paged_platform.router.metrics import RouterMetrics
from paged_platform.router.policies import PolicyParams, RouteRequest, make_policy
from paged_platform.router.pool import ReplicaPool

from tests.server.conftest import free_port


def series(metrics: RouterMetrics, url: str) -> list[str]:
    return [
        f"{s.name}{s.labels}"
        for family in metrics.registry.collect()
        for s in family.samples
        if s.labels.get("replica") == url
    ]


async def test_a_replica_that_leaves_drops_its_series_when_its_last_request_ends() -> None:
    metrics = RouterMetrics()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: its probe fails at once, locally
    async with aiohttp.ClientSession() as session:
        pool = ReplicaPool(
            make_policy("round_robin", PolicyParams()), metrics, session,
            max_in_flight=2, queue_size=1, queue_timeout=1.0, probe_interval=60.0,
        )  # fmt: skip
        pool.set_endpoints([url])
        replica = pool.replicas[url]
        replica.ready, replica.models = True, frozenset({"m"})  # as a successful probe would leave it
        first, second = pool.try_lease(RouteRequest("m")), pool.try_lease(RouteRequest("m"))
        assert first is not None and second is not None
        assert pool.try_lease(RouteRequest("m")) is None  # max_in_flight reached
        assert replica.in_flight == 2
        metrics.requests.labels("m", url, "round_robin").inc()

        pool.set_endpoints([])  # the replica leaves with two requests in flight
        first.release()
        first.release()  # a lease releases once
        assert replica.in_flight == 1
        assert series(metrics, url)  # still counting the request in flight
        second.release()
        assert series(metrics, url) == []
        await pool.close()
