"""Least load: the candidate with the fewest requests in flight plus waiting in its engine, KV usage breaking ties.

Stateless: the load lives in the replica states (the router's in-flight counts, the scraped engine gauges).
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_platform.router.policies.base import Decision, RouteRequest, least_loaded
from paged_platform.router.replica import ReplicaState


def choose(replicas: Sequence[ReplicaState]) -> Decision:
    return Decision(least_loaded(replicas).url, "least_load")


class LeastLoad:
    name = "least_load"

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return choose(replicas)

    def record(self, request: RouteRequest, decision: Decision) -> None:
        pass

    def forget(self, url: str) -> None:
        pass
