"""Round robin: each request to the next candidate in URL order, ignoring load and prefixes (the baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paged_platform.router.policies.base import Decision, RouteRequest
from paged_platform.router.replica import ReplicaState


@dataclass
class RoundRobinState:
    #: How many requests were routed so far; the next goes to candidate ``count % n``.
    count: int = 0


def choose(replicas: Sequence[ReplicaState], state: RoundRobinState) -> Decision:
    ordered = sorted(replicas, key=lambda r: r.url)
    return Decision(ordered[state.count % len(ordered)].url, "round_robin")


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self.state = RoundRobinState()

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return choose(replicas, self.state)

    def record(self, request: RouteRequest, decision: Decision) -> None:
        self.state.count += 1

    def forget(self, url: str) -> None:
        pass
