"""Session affinity: requests carrying the same session header go to the same replica while it can take them.

Replicas are ranked per session by rendezvous hashing (highest ``hash(session, url)`` first), so a replica
joining or leaving moves only the sessions that rank it first, and every router process agrees on the ranking.
The first ranked replica within the load limit takes the request (reason ``session``; ``load_bound`` when the
first choice was over it). A request without the header goes to the least loaded replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from paged_platform.router.policies.base import Decision, RouteRequest, least_loaded, load_limit, within_limit
from paged_platform.router.replica import ReplicaState


def _weight(session: str, url: str) -> bytes:
    return hashlib.blake2b(f"{session}\x00{url}".encode(), digest_size=8).digest()


def choose(request: RouteRequest, replicas: Sequence[ReplicaState], balance: float) -> Decision:
    if request.session is None:
        return Decision(least_loaded(replicas).url, "no_session")
    session = request.session
    ranked = sorted(replicas, key=lambda r: _weight(session, r.url), reverse=True)
    limit = load_limit(replicas, balance)
    for position, replica in enumerate(ranked):
        if within_limit(replica, limit):
            return Decision(replica.url, "session" if position == 0 else "load_bound")
    raise AssertionError("the least loaded replica is always within the load limit")


class Session:
    name = "session"

    def __init__(self, balance: float) -> None:
        self.balance = balance

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return choose(request, replicas, self.balance)

    def record(self, request: RouteRequest, decision: Decision) -> None:
        pass

    def forget(self, url: str) -> None:
        pass
