"""The request as policies see it, their answer, and the protocol every policy implements.

A policy's ``choose`` is a pure function of the request and the candidate replicas (never empty: the pool
hands over only ready replicas with room, and queues the request otherwise); the state it keeps (a round-robin
cursor, a prefix index) lives in a plain object that only ``record`` and ``forget`` change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from paged_platform.router.replica import ReplicaState


@dataclass(frozen=True)
class RouteRequest:
    model: str
    #: Chained hashes of the routing text's full chunks (see ``router.prompt``).
    chunks: tuple[int, ...] = ()
    chunk_chars: int = 64
    #: The session-affinity header's value, if the request carried one.
    session: str | None = None


@dataclass(frozen=True)
class Decision:
    url: str
    #: Why this replica: a short label, the ``reason`` of ``paged_router_requests_total``.
    reason: str
    #: Leading chunks of the request the router believes the replica has cached (its estimated prefix hit).
    matched_chunks: int = 0


class Policy(Protocol):
    name: str

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision: ...

    def record(self, request: RouteRequest, decision: Decision) -> None:
        """The request went where ``decision`` says."""

    def forget(self, url: str) -> None:
        """The replica left the pool."""


def least_loaded(replicas: Sequence[ReplicaState]) -> ReplicaState:
    """The replica with the least load; ties go to the one with fewer in-flight requests, then list order."""
    return min(replicas, key=lambda r: (r.load(), r.in_flight))


def load_limit(replicas: Sequence[ReplicaState], balance: float) -> int:
    """The most in-flight requests a replica may hold after taking one more, under bounded-load affinity.

    ``ceil(balance * (total + 1) / n)``: affinity (prefix, session) may send a request to its preferred replica
    only while that keeps the replica within ``balance`` times the mean, so a hot prefix spreads instead of
    piling onto one replica. The least-loaded replica is always within the limit (its load is at most the
    mean), so some replica is always eligible.
    """
    if balance < 1.0:
        raise ValueError(f"balance factor must be >= 1, got {balance}")
    total = sum(r.in_flight for r in replicas) + 1
    # Rounded before the ceiling, so that 1.5 * 4 / 3 is 2, not 3 for a last-bit float error.
    return max(1, math.ceil(round(balance * total / len(replicas), 9)))


def within_limit(replica: ReplicaState, limit: int) -> bool:
    return replica.in_flight + 1 <= limit
