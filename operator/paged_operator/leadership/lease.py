"""Leader election on a ``coordination.k8s.io/v1`` Lease, as pure rules (``leader`` does the I/O).

The algorithm is client-go's ``leaderelection``, re-derived:

* A candidate takes the Lease when nobody holds it (none yet, or released: no holder), or when the holder
  has not renewed it for ``duration_s`` *as this candidate observed*: expiry is judged by the local
  monotonic time at which the candidate last saw the record change, never by comparing the record's
  timestamps with the local wall clock, so clock skew between nodes cannot make two leaders.
* The holder renews every ``retry_period_s``. A holder that has not renewed for ``renew_deadline_s``
  stops acting (``still_leading`` is false) before any candidate may take over, since
  ``renew_deadline_s < duration_s``: the gap is the margin that keeps two replicas from ever acting at once.
* Every write carries the Lease's ``resourceVersion``, so of two candidates racing for an expired Lease
  exactly one wins (the other gets a 409 and observes the winner's record).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class LeaseSpec:
    """Timings in seconds: ``duration_s`` > ``renew_deadline_s`` > ``retry_period_s`` > 0 (client-go's defaults)."""

    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                "lease timings must satisfy 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s:g} s, {self.renew_deadline_s:g} s, {self.duration_s:g} s"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec: who holds it, since when, last renewed when, for how long, and how often it changed hands."""

    holder: str | None
    duration_s: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int = 0


@dataclass(frozen=True)
class Observed:
    """A record as this candidate last saw it, at which ``resourceVersion``, and when (local monotonic seconds)
    that version was first seen."""

    record: LeaseRecord
    version: str
    seen_at: float


def observe(previous: Observed | None, record: LeaseRecord, version: str, now: float) -> Observed:
    """The observation after reading ``record`` at ``version``: its change time moves only when the Lease was
    written since. Judged by the version, not the record's content: every renewal is a write, even one whose
    timestamps repeat (a wall clock stepped back)."""
    if previous is not None and previous.version == version:
        return previous
    return Observed(record, version, now)


def attempt(spec: LeaseSpec, me: str, observed: Observed | None, *, wall: datetime, now: float) -> LeaseRecord | None:
    """The record to write to acquire or renew the Lease, or None while another holder's lease is valid.

    ``observed`` None: there is no Lease yet. ``wall`` is written into the record (for people reading it);
    ``now`` (monotonic) judges expiry.
    """
    duration = max(1, round(spec.duration_s))
    if observed is None:
        return LeaseRecord(me, duration, wall, wall, 0)
    record = observed.record
    if record.holder == me:
        return replace(record, duration_s=duration, renew_time=wall)
    expired = now - observed.seen_at >= record.duration_s
    if record.holder and not expired:
        return None
    return LeaseRecord(me, duration, wall, wall, record.transitions + 1)


def released(record: LeaseRecord, wall: datetime) -> LeaseRecord:
    """What a leader stepping down writes: no holder, so a candidate takes over at its next retry, not a
    whole lease duration later."""
    return replace(record, holder=None, duration_s=1, renew_time=wall)


def still_leading(spec: LeaseSpec, renewed_at: float | None, now: float) -> bool:
    """Whether a leader whose last successful renewal was *sent* at ``renewed_at`` may still act."""
    return renewed_at is not None and now - renewed_at < spec.renew_deadline_s
