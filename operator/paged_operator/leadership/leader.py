"""The Lease loop: acquire the operator's Lease, keep renewing it, release it on the way out (rules in ``lease``).

Only the leader runs the operator's handlers (``cli`` starts kopf once ``acquire`` returns and stops it when
``keep`` returns); the handlers also check ``leading`` before each write, so a leader that lost its Lease
while a decision was in flight writes nothing more of it. Each Lease call is bounded by the time left
before the renew deadline: a slow API server cannot keep a leader acting past it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from paged_operator import operator_metrics
from paged_operator.clients.kube import ApiError, KubeApi, collection_path, object_path
from paged_operator.leadership.lease import LeaseRecord, LeaseSpec, Observed, attempt, observe, released, still_leading

log = logging.getLogger(__name__)
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def record_from_wire(lease: Mapping[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def record_to_wire(record: LeaseRecord) -> dict[str, Any]:
    return {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration_s,
        "acquireTime": _format_time(record.acquire_time),
        "renewTime": _format_time(record.renew_time),
        "leaseTransitions": record.transitions,
    }


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _format_time(value: datetime | None) -> str | None:
    return value.astimezone(UTC).strftime(MICRO_TIME) if value is not None else None


class LeaderElector:
    """One candidate for the Lease ``namespace/name``, identified by ``identity`` (the pod's name)."""

    def __init__(
        self,
        kube: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        spec: LeaseSpec,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._namespace, self._name, self._identity = namespace, name, identity
        self._spec = spec
        self._clock = clock
        self._observed: Observed | None = None
        self._renewed_at: float | None = None  # when the last successful write was sent

    @property
    def identity(self) -> str:
        return self._identity

    def leading(self) -> bool:
        """True while this candidate holds the Lease and its last renewal is within the renew deadline."""
        return still_leading(self._spec, self._renewed_at, self._clock())

    async def acquire(self) -> None:
        """Return once this candidate leads; until then retry every ``retry_period_s`` (jittered)."""
        while not await self._try():
            await asyncio.sleep(self._spec.retry_period_s * random.uniform(1.0, 1.2))
        log.info("leading as %s (lease %s/%s)", self._identity, self._namespace, self._name)

    async def keep(self) -> None:
        """Renew every ``retry_period_s``; return when the renew deadline has passed without a renewal."""
        while True:
            await asyncio.sleep(self._spec.retry_period_s)
            await self._try()
            if not self.leading():
                operator_metrics.LEADER.set(0)
                log.error("lost the lease %s/%s: not renewed within %g s", self._namespace, self._name,
                          self._spec.renew_deadline_s)  # fmt: skip
                return

    async def release(self) -> None:
        """Step down (best effort, within one retry period): no holder, so a standby takes over at once."""
        if not self.leading() or self._observed is None:
            return
        record = released(self._observed.record, datetime.now(UTC))
        self._renewed_at = None
        operator_metrics.LEADER.set(0)
        try:
            async with asyncio.timeout(self._spec.retry_period_s):
                await self._write(record)
            log.info("released the lease %s/%s", self._namespace, self._name)
        except (TimeoutError, ApiError, httpx.HTTPError) as exc:
            log.warning("could not release the lease %s/%s (it expires on its own): %s", self._namespace,
                        self._name, exc)  # fmt: skip

    async def _try(self) -> bool:
        """One acquire-or-renew round; True if this candidate holds the Lease after it."""
        sent = self._clock()
        # A leader's round must end before its renew deadline; a candidate's within one retry period.
        budget = (self._renewed_at + self._spec.renew_deadline_s - sent) if self.leading() else None
        try:
            async with asyncio.timeout(max(0.1, budget if budget is not None else self._spec.retry_period_s)):
                lease = await self._kube.get_optional(object_path("Lease", self._namespace, self._name))
                if lease is not None:
                    self._remember(lease)
                    if self._observed is not None and self._observed.record.holder != self._identity:
                        self._renewed_at = None  # someone else holds it: stop acting now, not at the deadline
                wanted = attempt(
                    self._spec,
                    self._identity,
                    self._observed if lease is not None else None,
                    wall=datetime.now(UTC),
                    now=self._clock(),
                )
                if wanted is None:
                    return False
                await (self._write(wanted) if lease is not None else self._create(wanted))
        except (TimeoutError, ApiError, httpx.HTTPError) as exc:
            if not (isinstance(exc, ApiError) and exc.code == 409):  # 409: another candidate wrote first
                log.warning("lease %s/%s: %s", self._namespace, self._name, str(exc) or type(exc).__name__)
            return False
        self._renewed_at = sent
        operator_metrics.LEADER.set(1)
        return True

    async def _create(self, record: LeaseRecord) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": record_to_wire(record),
        }
        created = await self._kube.request("POST", collection_path("Lease", self._namespace), body)
        self._remember(created)

    async def _write(self, record: LeaseRecord) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace, "resourceVersion": self._version()},
            "spec": record_to_wire(record),
        }
        written = await self._kube.request("PUT", object_path("Lease", self._namespace, self._name), body)
        self._remember(written)

    def _version(self) -> str | None:
        return self._observed.version if self._observed is not None else None

    def _remember(self, lease: Mapping[str, Any]) -> None:
        version = lease["metadata"]["resourceVersion"]
        self._observed = observe(self._observed, record_from_wire(lease), version, self._clock())
