"""Prefix affinity with bounded load: the candidate believed to hold the longest prefix of the request.

Among the candidates within the load limit (``base.load_limit``), the one with the most leading chunks in the
prefix index wins, ties to the least loaded; with no match anywhere, the least loaded. A replica past the limit
is passed over even when it holds the longest prefix (reason ``load_bound``), so a hot prefix spills to a
second replica, which then builds its own copy, instead of pinning one replica.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_platform.router.policies.base import Decision, RouteRequest, least_loaded, load_limit, within_limit
from paged_platform.router.policies.prefix_index import PrefixIndex
from paged_platform.router.replica import ReplicaState


def choose(request: RouteRequest, replicas: Sequence[ReplicaState], index: PrefixIndex, balance: float) -> Decision:
    limit = load_limit(replicas, balance)
    matches = {r.url: index.match(r.url, request.chunks) for r in replicas}
    eligible = [r for r in replicas if within_limit(r, limit)]
    best = max(eligible, key=lambda r: (matches[r.url], -r.load(), -r.in_flight))
    bounded = max(matches.values()) > matches[best.url]
    if matches[best.url] == 0:
        chosen = least_loaded(eligible)
        return Decision(chosen.url, "load_bound" if bounded else "prefix_miss")
    return Decision(best.url, "load_bound" if bounded else "prefix_hit", matches[best.url])


class Prefix:
    name = "prefix"

    def __init__(self, index: PrefixIndex, balance: float) -> None:
        self.index = index
        self.balance = balance

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return choose(request, replicas, self.index, self.balance)

    def record(self, request: RouteRequest, decision: Decision) -> None:
        self.index.insert(decision.url, request.chunks)

    def forget(self, url: str) -> None:
        self.index.forget(url)
