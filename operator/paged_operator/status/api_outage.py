"""Decisions the API server could not take: since when, how many, why; reported once it answers again.

While the API server (or the etcd behind it) is down or hangs, the control loop can neither carry out nor
record a decision. Invariants:

* nothing is written, so what is in force stays: the replica count and the budgets the engines run. The
  engines keep serving; their scrapes go on (they do not need the API server), but a decision made on them
  is dropped, not queued: the next one is made afresh on the data of its time;
* each skipped decision is one log line, not a traceback;
* the first decision that writes again reports the gap on the object (``Degraded=True``, reason
  ``APIUnavailable``, and a Warning Event that stays after the condition has cleared), so an outage nobody
  watched live is still visible; the decision after it sets ``Degraded`` from the metrics again.

Only failures of the API server itself count (no connection, a timeout, a 5xx, 429): a refusal (4xx) or a
write conflict is a fact about the request, and is handled where it happens.

kopf's own requests (its watches above all) retry along ``RetryForever``: kopf's default gives up after
eight retries (about a minute), and a watch that gives up on a 5xx (an API server slow to start, an etcd away
for longer) ends its watcher for good: the operator would run on without seeing any change.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime

import httpx
from paged_platform.engine_contract.budgets import Budgets

from paged_operator.clients.kube import ApiError
from paged_operator.status.builder import ConditionValue

REASON = "APIUnavailable"
#: Server-side failures a later attempt may not meet (the API server starting, etcd unavailable, overload).
UNAVAILABLE_CODES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryForever:
    """kopf's ``settings.networking.error_backoffs`` that never run out: ``steps``, then ``cap_s`` for ever.
    kopf iterates it afresh for each request, so every request starts again from the first step."""

    steps: tuple[float, ...] = (1, 1, 2, 3, 5, 8)
    cap_s: float = 10.0

    def __iter__(self) -> Iterator[float]:
        return itertools.chain(self.steps, itertools.repeat(self.cap_s))


@dataclass(frozen=True)
class Outage:
    """Decisions skipped in a row: the first one's time, how many, and the last error."""

    since: datetime
    skipped: int
    last_error: str


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the API server could not be reached or could not answer (rather than refused)."""
    if isinstance(exc, ApiError):
        return exc.code in UNAVAILABLE_CODES
    return isinstance(exc, httpx.TransportError | TimeoutError)


def skipped(outage: Outage | None, now: datetime, exc: BaseException) -> Outage:
    """The outage after one more decision skipped at ``now`` because of ``exc``."""
    error = str(exc) or type(exc).__name__
    if outage is None:
        return Outage(since=now, skipped=1, last_error=error)
    return replace(outage, skipped=outage.skipped + 1, last_error=error)


def report(outage: Outage, now: datetime, replicas: int, budgets: Budgets) -> ConditionValue:
    """``Degraded`` for the first decision written after ``outage``: how long, how many decisions, the last
    error, and what stayed in force meanwhile."""
    seconds = max(0, round((now - outage.since).total_seconds()))
    decisions = "decision" if outage.skipped == 1 else "decisions"
    return ConditionValue(
        "True",
        REASON,
        f"the API server could not be reached for {seconds} s ({outage.skipped} {decisions} skipped since "
        f"{outage.since:%Y-%m-%dT%H:%M:%SZ}; last error: {outage.last_error[:300]}); kept {replicas} replicas and "
        f"budgets {budgets.max_num_seqs}/{budgets.max_num_batched_tokens} meanwhile",
    )
