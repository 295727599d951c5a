"""The replicas behind the router: their probes, the policy's view of them, and leases on their capacity.

A replica takes new requests only while its last ``/ready`` answer was 200 (a draining engine answers 503), it
serves the request's model (its base model or a loaded adapter, learned from ``paged_served_model_info`` in its
``/metrics``) and it has fewer than ``max_in_flight``
requests from this router. A :class:`Lease` is one such request in flight: taking one counts it on the
replica, releasing it (exactly once) uncounts it and offers the room to the model's queue.

Endpoints come and go through :meth:`ReplicaPool.set_endpoints` (static list or EndpointSlice watch). A replica
that leaves keeps its leases valid until they are released; the policy forgets its state at once, the metrics
its series once its last request has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

import aiohttp

from paged_platform.router.metrics import RouterMetrics
from paged_platform.router.policies import Decision, Policy, RouteRequest
from paged_platform.router.queue import AdmissionQueue
from paged_platform.router.replica import ReplicaState
from paged_platform.router.scrape import parse_load

log = logging.getLogger("paged_router")


class Lease:
    def __init__(self, pool: ReplicaPool, replica: ReplicaState, decision: Decision, model: str) -> None:
        self.pool = pool
        self.replica = replica
        self.decision = decision
        self.model = model
        self.queued_s = 0.0  # how long the request waited in its model's queue for this lease
        self._released = False

    @property
    def url(self) -> str:
        return self.replica.url

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self.replica.in_flight -= 1
        self.pool.metrics.in_flight.labels(self.model, self.url).dec()
        if self.replica.in_flight == 0 and self.pool.replicas.get(self.url) is not self.replica:
            self.pool.metrics.forget_replica(self.url)  # the replica left while this request ran
        self.pool.wake(self.model)


class ReplicaPool:
    def __init__(
        self,
        policy: Policy,
        metrics: RouterMetrics,
        session: aiohttp.ClientSession,
        *,
        max_in_flight: int,
        queue_size: int,
        queue_timeout: float,
        probe_interval: float,
        probe_timeout: float = 2.0,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max in-flight requests per replica must be >= 1, got {max_in_flight}")
        if not probe_interval > 0:
            raise ValueError(f"probe interval must be > 0 seconds, got {probe_interval}")
        self.policy = policy
        self.metrics = metrics
        self.session = session
        self.max_in_flight = max_in_flight
        self.queue_size = queue_size
        self.queue_timeout = queue_timeout
        self.probe_interval = probe_interval
        self.probe_timeout = aiohttp.ClientTimeout(total=probe_timeout)
        self.replicas: dict[str, ReplicaState] = {}
        self.queues: dict[str, AdmissionQueue[Lease]] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._probed: dict[str, asyncio.Event] = {}

    # ---- membership ----

    def set_endpoints(self, urls: Iterable[str]) -> None:
        wanted = {url.rstrip("/") for url in urls}
        for url in set(self.replicas) - wanted:
            log.info("replica %s left", url)
            replica = self.replicas.pop(url)
            replica.ready = False
            if replica.in_flight == 0:  # else the last lease's release forgets its series
                self.metrics.forget_replica(url)
            self._probes.pop(url).cancel()
            self._probed.pop(url, None)
            self.policy.forget(url)
        for url in sorted(wanted - set(self.replicas)):
            log.info("replica %s joined", url)
            self.replicas[url] = ReplicaState(url)
            self._probed[url] = asyncio.Event()
            self._probes[url] = asyncio.create_task(self._probe_loop(url), name=f"probe {url}")
        self._count_replicas()

    async def wait_probed(self, timeout: float) -> None:
        """Until every current replica has answered (or failed) its first probe, at most ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                for event in list(self._probed.values()):
                    await event.wait()

    async def close(self) -> None:
        for task in self._probes.values():
            task.cancel()
        for task in self._probes.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._probes.clear()

    # ---- choosing ----

    def models(self) -> frozenset[str]:
        """Every model name some replica served at its last probe (adapters included)."""
        return frozenset().union(*(r.models for r in self.replicas.values()))

    def base_models(self) -> frozenset[str]:
        return frozenset().union(*(r.base_models for r in self.replicas.values()))

    def queue(self, model: str) -> AdmissionQueue[Lease]:
        if model not in self.queues:
            self.queues[model] = AdmissionQueue(self.queue_size, self.queue_timeout)
        return self.queues[model]

    def try_lease(self, request: RouteRequest, excluded: frozenset[str] = frozenset()) -> Lease | None:
        """A lease on the replica the policy picks among those that can take ``request`` now, else None."""
        candidates = [
            r
            for r in self.replicas.values()
            if r.ready and r.in_flight < self.max_in_flight and request.model in r.models and r.url not in excluded
        ]
        if not candidates:
            return None
        decision = self.policy.choose(request, candidates)
        self.policy.record(request, decision)
        replica = self.replicas[decision.url]
        replica.in_flight += 1
        self.metrics.in_flight.labels(request.model, replica.url).inc()
        return Lease(self, replica, decision, request.model)

    async def lease(self, request: RouteRequest) -> Lease:
        """A lease for ``request``, waiting in its model's queue if no replica has room."""
        queue = self.queue(request.model)
        gauge = self.metrics.queue_depth.labels(request.model)
        start = time.perf_counter()
        gauge.inc()
        try:
            lease = await queue.admit(lambda: self.try_lease(request))
        finally:
            gauge.dec()
        lease.queued_s = time.perf_counter() - start
        self.metrics.queue_time.labels(request.model).observe(lease.queued_s)
        return lease

    def wake(self, model: str | None = None) -> None:
        """Room may have appeared for ``model`` (or for every model)."""
        for name, queue in list(self.queues.items()):
            if model is None or name == model:
                queue.wake()

    def mark_unready(self, url: str, reason: str) -> None:
        """A request found the replica refusing or unreachable: no new requests until a probe says ready."""
        replica = self.replicas.get(url)
        if replica is not None and replica.ready:
            log.warning("replica %s marked not ready: %s", url, reason)
            replica.ready, replica.reason = False, reason
            self._count_replicas()

    # ---- probes ----

    async def _probe_loop(self, url: str) -> None:
        while True:
            try:
                await self.probe(url)
            except asyncio.CancelledError:
                raise
            except Exception:  # a probe must never end its loop: log it and try again next interval
                log.exception("probe of %s failed", url)
            finally:
                if url in self._probed:
                    self._probed[url].set()
            await asyncio.sleep(self.probe_interval)

    async def probe(self, url: str) -> None:
        replica = self.replicas.get(url)
        if replica is None:
            return
        was_ready, old_models = replica.ready, replica.models
        try:
            ready, reason = await self._get_ready(url)
            async with self.session.get(f"{url}/metrics", timeout=self.probe_timeout) as response:
                text = await response.text() if response.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            replica.ready, replica.reason = False, f"unreachable: {type(exc).__name__}"
        else:
            if text:
                try:
                    load = parse_load(text)
                except ValueError:
                    log.warning("replica %s: /metrics is not Prometheus text", url)
                else:
                    replica.models, replica.base_models = load.models, load.base_models
                    replica.waiting, replica.kv_usage = load.waiting, load.kv_usage
            replica.ready, replica.reason = ready and bool(replica.models), reason
            if ready and not replica.models:
                replica.reason = "serves no model (no model_name label in /metrics)"
        if replica.ready != was_ready:
            log.info("replica %s %s", url, "ready" if replica.ready else f"not ready: {replica.reason}")
            self._count_replicas()
        if replica.ready and (not was_ready or replica.models != old_models):
            self.wake()

    async def _get_ready(self, url: str) -> tuple[bool, str]:
        async with self.session.get(f"{url}/ready", timeout=self.probe_timeout) as response:
            if response.status == 200:
                return True, "ready"
            try:
                body = await response.json(content_type=None)
                reason = str(body.get("reason", f"/ready answered {response.status}"))
            except (ValueError, AttributeError):
                reason = f"/ready answered {response.status}"
            return False, reason

    def _count_replicas(self) -> None:
        ready = sum(r.ready for r in self.replicas.values())
        self.metrics.replicas.labels("ready").set(ready)
        self.metrics.replicas.labels("not_ready").set(len(self.replicas) - ready)
