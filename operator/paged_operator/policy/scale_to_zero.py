"""Scale to zero and back, as a pure policy: a fleet with ``replicas.min: 0`` and a router goes to zero after
``autoscaling.idleSeconds`` without requests, and wakes (0 → 1) when the router holds requests for it.

A fleet at zero has no engine to report load, so the demand comes from the router in front of it
(``router_demand``): the requests it holds now (it queues them while no replica is ready, bounded in number
and time) and the requests it has received (a counter). The autoscaler keeps the count at one or more while
any replica runs; going to zero is this policy's alone, and only on evidence:

* **Wake** when the routers hold at least one request and no replica exists or is starting. One replica:
  its load then drives the autoscaler as usual.
* **Sleep** when, for ``idle_s``, the routers received nothing new, held nothing, and the engines ran and
  queued nothing (a long generation in flight is activity, whatever the arrivals say). Without an answer from
  any router there is no evidence of idleness: never sleep blind.

Invariants: never wakes without held requests, never sleeps while requests run, wait or arrive; the idle clock
restarts on every sign of activity and on the first observation (a restarted operator waits ``idle_s`` again
unless its memory says otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZeroSpec:
    idle_s: float

    def __post_init__(self) -> None:
        if not self.idle_s > 0:
            raise ValueError(f"idle time must be positive, got {self.idle_s} s")


@dataclass(frozen=True)
class RouterDemand:
    """What the routers of one ModelDeployment report, summed over router replicas."""

    held: float  # requests waiting for a replica now
    arrivals_total: float  # requests received since each router started (a counter)


@dataclass(frozen=True)
class ZeroState:
    arrivals_total: float | None = None  # the counter at the last observation
    last_active: float | None = None  # the last time requests arrived, waited or ran


@dataclass(frozen=True)
class ZeroDecision:
    replicas: int | None  # None: leave the count to the autoscaler
    reason: str


def observe(state: ZeroState, demand: RouterDemand | None, busy: bool, now: float) -> ZeroState:
    """The idle clock after this observation. ``busy``: the engines run or queue requests."""
    if demand is None:
        return ZeroState(state.arrivals_total, now if busy else state.last_active)
    previous, total = state.arrivals_total, demand.arrivals_total
    if previous is None:
        arrived = False
    elif total >= previous:
        arrived = total > previous
    else:  # the counter went down: a restarted router; what it counts now arrived since
        arrived = total > 0
    active = busy or demand.held > 0 or arrived or state.last_active is None
    return ZeroState(demand.arrivals_total, now if active else state.last_active)


def decide(
    spec: ZeroSpec, state: ZeroState, demand: RouterDemand | None, *, capacity: int, busy: bool, now: float
) -> tuple[ZeroDecision, ZeroState]:
    """``capacity``: replicas ready or starting."""
    state = observe(state, demand, busy, now)
    if capacity == 0:
        if demand is not None and demand.held > 0:
            return ZeroDecision(1, f"{demand.held:g} request(s) held by the router: waking from zero"), state
        return ZeroDecision(0, "scaled to zero: no request held by the router"), state
    if demand is None:
        return ZeroDecision(None, "no router answered: not judging idleness"), state
    idle = now - state.last_active if state.last_active is not None else 0.0
    if idle >= spec.idle_s:
        return ZeroDecision(0, f"no requests for {idle:.0f} s (idleSeconds {spec.idle_s:g}): scaling to zero"), state
    return ZeroDecision(None, f"idle for {idle:.0f} s of {spec.idle_s:g}"), state
