"""Routing policies: pure ``choose(request, replicas, state)`` functions, one module each, and their registry."""

from __future__ import annotations

from dataclasses import dataclass

from paged_platform.router.policies.base import Decision, Policy, RouteRequest
from paged_platform.router.policies.cache_aware import CacheAware
from paged_platform.router.policies.least_load import LeastLoad
from paged_platform.router.policies.prefix import Prefix
from paged_platform.router.policies.prefix_index import PrefixIndex
from paged_platform.router.policies.round_robin import RoundRobin
from paged_platform.router.policies.session import Session

POLICY_NAMES = ("cache_aware", "prefix", "least_load", "round_robin", "session")
DEFAULT_POLICY = "cache_aware"


@dataclass(frozen=True)
class PolicyParams:
    #: Affinity may load a replica up to this many times the mean in-flight count (bounded-load hashing).
    balance: float = 1.25
    #: cache_aware: weight of relative load against the prefix share in a candidate's score.
    load_weight: float = 0.5
    #: Chunks of prefix the index keeps per replica (its stand-in for the engine's cache capacity).
    index_chunks: int = 200_000


def make_policy(name: str, params: PolicyParams) -> Policy:
    if name == "cache_aware":
        return CacheAware(PrefixIndex(params.index_chunks), params.balance, params.load_weight)
    if name == "prefix":
        return Prefix(PrefixIndex(params.index_chunks), params.balance)
    if name == "least_load":
        return LeastLoad()
    if name == "round_robin":
        return RoundRobin()
    if name == "session":
        return Session(params.balance)
    raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")


__all__ = ["DEFAULT_POLICY", "POLICY_NAMES", "Decision", "Policy", "PolicyParams", "RouteRequest", "make_policy"]
