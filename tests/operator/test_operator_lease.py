"""Leader election rules (``lease``): who may take, renew and hold the Lease; two candidates never act at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_operator.leadership.lease import LeaseRecord, LeaseSpec, Observed, attempt, observe, released, still_leading

SPEC = LeaseSpec(duration_s=15, renew_deadline_s=10, retry_period_s=2)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 12, 1, 12, 5, tzinfo=UTC)


def held_by(holder: str | None, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, 15, T0, T0, transitions)


def test_no_lease_is_created_by_the_first_candidate() -> None:
    assert attempt(SPEC, "a", None, wall=T0, now=0.0) == LeaseRecord("a", 15, T0, T0, 0)


def test_the_holder_renews_keeping_when_it_acquired() -> None:
    renewed = attempt(SPEC, "a", Observed(held_by("a"), "7", 0.0), wall=LATER, now=100.0)
    assert renewed == LeaseRecord("a", 15, T0, LATER, 3)


def test_another_holder_is_waited_for_until_its_lease_expires_as_observed_here() -> None:
    seen = Observed(held_by("b"), "7", seen_at=50.0)
    assert attempt(SPEC, "a", seen, wall=LATER, now=64.9) is None
    assert attempt(SPEC, "a", seen, wall=LATER, now=65.0) == LeaseRecord("a", 15, LATER, LATER, 4)


def test_a_released_lease_is_taken_at_once() -> None:
    free = released(held_by("b"), LATER)
    assert free.holder is None and free.duration_s == 1
    assert attempt(SPEC, "a", Observed(free, "8", seen_at=50.0), wall=LATER, now=50.0) == LeaseRecord(
        "a", 15, LATER, LATER, 4
    )


def test_expiry_counts_from_the_last_write_seen_not_from_the_records_clock() -> None:
    first = observe(None, held_by("b"), "7", 10.0)
    assert observe(first, held_by("b"), "7", 20.0) is first  # not written since: still seen since 10
    assert observe(first, held_by("b"), "8", 20.0) == Observed(held_by("b"), "8", 20.0)  # renewed, same timestamps


def test_a_leader_stops_at_its_renew_deadline() -> None:
    assert still_leading(SPEC, 100.0, 109.9) and not still_leading(SPEC, 100.0, 110.0)
    assert not still_leading(SPEC, None, 0.0)


@pytest.mark.parametrize(("duration", "deadline", "retry"), [(10, 10, 2), (15, 10, 10), (15, 10, 0)])
def test_timings_must_nest(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseSpec(duration, deadline, retry)


@dataclass
class Candidate:
    name: str
    observed: Observed | None = None
    renewed_at: float | None = None  # send time of the last write that succeeded
    next_try: float = 0.0
    busy: bool = False  # a write is in flight (the elector awaits it)


@settings(max_examples=100, deadline=None)
@given(
    troubles=st.lists(
        st.tuples(st.integers(0, 1), st.sampled_from(["paused", "cut off"]), st.floats(0, 60), st.floats(0, 20)),
        max_size=6,
    ),
    latency=st.floats(0, 1.0),
)
def test_two_candidates_never_act_at_once(troubles: list[tuple[int, str, float, float]], latency: float) -> None:
    """Candidates get into trouble at random: *paused* (a GC pause: no attempts, no acting) or *cut off* from the
    API server (attempts fail, but the process runs on and acts while it believes it leads). A write reaches
    the store ``latency`` after it was sent and succeeds only if the Lease is still at the version it was
    computed from; its answer takes as long again. At no instant do two candidates act."""
    spec = LeaseSpec(duration_s=4, renew_deadline_s=3, retry_period_s=0.5)
    version, lease = 0, None
    writes: list[tuple[float, Candidate, int, LeaseRecord, float]] = []  # (lands at, who, base version, record, sent)
    answers: list[tuple[float, Candidate, float, bool]] = []  # (arrives at, who, sent, succeeded)
    people = [Candidate("a"), Candidate("b")]

    def trouble(index: int, t: float) -> str | None:
        return next((k for who, k, start, n in troubles if who == index and start <= t < start + n), None)

    for tick in range(0, 1800):
        t = tick * 0.05
        for write in [w for w in writes if w[0] <= t]:
            writes.remove(write)
            _, who, base, record, sent = write
            ok = base == version
            if ok:
                version, lease = version + 1, record
            answers.append((t + latency, who, sent, ok))
        for answer in [a for a in answers if a[0] <= t]:
            answers.remove(answer)
            _, who, sent, ok = answer
            who.busy = False
            if ok and trouble(people.index(who), t) != "cut off":  # a cut-off candidate never hears back
                who.renewed_at = sent
        for index, person in enumerate(people):
            if trouble(index, t) is not None or person.busy or t < person.next_try:
                continue
            person.next_try = t + spec.retry_period_s
            if lease is not None:
                person.observed = observe(person.observed, lease, str(version), t)
                if lease.holder != person.name:
                    person.renewed_at = None
            wanted = attempt(spec, person.name, person.observed if lease is not None else None, wall=T0, now=t)
            if wanted is not None:
                person.busy = True
                writes.append((t + latency, person, version, wanted, t))
        acting = [
            p.name for i, p in enumerate(people) if trouble(i, t) != "paused" and still_leading(spec, p.renewed_at, t)
        ]
        assert len(acting) <= 1, f"{acting} act at once at t={t:.2f}"
    assert lease is not None and lease.holder in ("a", "b")  # someone leads in the end
