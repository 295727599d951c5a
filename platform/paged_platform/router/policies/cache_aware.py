"""The default: prefix affinity and load, scored together, under the same load bound as ``prefix``.

Each candidate within the load limit scores ``matched / chunks - load_weight * load / (max_load + 1)``: the
share of the prompt it is believed to hold, less its load relative to the busiest candidate. A replica holding
the whole prompt beats an idle one unless ``load_weight`` says load matters more; with no prefix information
(short prompts, cold index) the score is load alone, i.e. least load.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_platform.router.policies.base import Decision, RouteRequest, load_limit, within_limit
from paged_platform.router.policies.prefix_index import PrefixIndex
from paged_platform.router.replica import ReplicaState


def choose(
    request: RouteRequest, replicas: Sequence[ReplicaState], index: PrefixIndex, balance: float, load_weight: float
) -> Decision:
    limit = load_limit(replicas, balance)
    matches = {r.url: index.match(r.url, request.chunks) for r in replicas}
    eligible = [r for r in replicas if within_limit(r, limit)]
    total = max(len(request.chunks), 1)
    max_load = max(r.load() for r in eligible)

    def score(r: ReplicaState) -> tuple[float, float, int]:
        return (matches[r.url] / total - load_weight * r.load() / (max_load + 1), -r.load(), -r.in_flight)

    best = max(eligible, key=score)
    matched = matches[best.url]
    if max(matches.values()) > max(matches[r.url] for r in eligible):
        reason = "load_bound"
    else:
        reason = "prefix_hit" if matched else "least_load"
    return Decision(best.url, reason, matched)


class CacheAware:
    name = "cache_aware"

    def __init__(self, index: PrefixIndex, balance: float, load_weight: float) -> None:
        if load_weight < 0:
            raise ValueError(f"load weight must be >= 0, got {load_weight}")
        self.index = index
        self.balance = balance
        self.load_weight = load_weight

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return choose(request, replicas, self.index, self.balance, self.load_weight)

    def record(self, request: RouteRequest, decision: Decision) -> None:
        self.index.insert(decision.url, request.chunks)

    def forget(self, url: str) -> None:
        self.index.forget(url)
