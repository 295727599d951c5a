"""What the router knows of one replica, as a plain object the policies read and the pool writes.

``in_flight`` is the router's own count of requests it has sent there and not yet finished: exact and
current. ``waiting`` and ``kv_usage`` come from the replica's ``/metrics`` (``paged_requests_waiting``,
``paged_kv_cache_usage_ratio``) at the last probe: they see other clients' load too, but lag by up to a probe
interval. ``ready`` is the last ``/ready`` answer, turned false at once when a request finds the replica
refusing work (503) or unreachable, so no new request goes there until a probe says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReplicaState:
    url: str
    ready: bool = False
    in_flight: int = 0
    waiting: float = 0.0
    kv_usage: float = 0.0
    #: The model names it serves now, adapters included (``scrape.parse_load``), and the base models among them.
    models: frozenset[str] = field(default_factory=frozenset)
    base_models: frozenset[str] = field(default_factory=frozenset)
    #: Why the replica is not ready ("draining", "unreachable", ...), for logs and /router/replicas.
    reason: str = "not probed yet"

    def load(self) -> float:
        """Queued work: requests in flight plus the engine's waiting queue, KV usage (0-1) breaking ties."""
        return self.in_flight + self.waiting + self.kv_usage
