"""Replica autoscaler: a pure policy from a fleet view to a desired replica count and a human reason.

Borrowed ideas (re-derived, not copied): the HPA's ``desired = ceil(ready × value / target)`` per
signal with a tolerance band and asymmetric stabilisation windows, and Knative's panic mode.

* **Signals.** KV-cache utilisation, waiting requests per replica, preemptions per second per
  replica, (optionally) TTFT p95 against an SLO, and the use of the ``max_num_seqs`` budget
  (running / max_num_seqs, held to the KV target: when the budget caps the batch below what KV
  allows, KV usage understates load, a scale-down "to target" overloads the rest and the fleet
  flaps, as the simulation showed). Each is turned into a *demand* in replicas, mostly
  ``ready × value / target``; the queue instead uses arrivals over completions (``_queue_signal``).
  The largest demand wins, because any one saturated resource is enough to hurt users. A
  scale-down keeps ``tolerance`` headroom, and one that had to be undone leaves a floor behind.
* **Scale-down by served rate, not only by utilisation.** KV usage is convex in load (Little's law:
  more load also means longer requests, as the batch slows every step), so ``ready × kv / target``
  asks for far too few replicas at low utilisation (4 pods at KV 0.11 serve 8 requests/s, which one
  pod cannot). The ``arrival_rate`` signal is the fleet's arrival rate over the highest per-replica
  completion rate seen near (just under) the targets (within ``capacity_memory_s``): a rate one replica
  is known to serve on target. It is a lower bound on capacity, so it never asks for more than the
  current count (that is the other signals' job) and only stops scale-downs below what was seen to
  work; being a measurement, not a projection, it gets no scale-down headroom.
* **Missing pods are not idle pods.** Per-replica values are means over the pods that answered,
  scaled to the ready count. When too few answered (``FleetView.degraded``) it may scale up
  but never down, since a partial view can hide load, not invent it. Nor does it scale down
  while requests wait above target (a backlog is unmet demand, whatever KV usage says).
* **Credit for starting pods.** Capacity is ``ready + starting``: a pod that is booting will take
  its share soon, so demand must exceed it before another pod is added (no overshoot while a
  multi-minute model load is in progress).
* **Stabilisation.** A scale-up needs every recommendation of the short up-window to agree (their
  minimum); a scale-down takes the largest recommendation of the long down-window. Fast up, slow
  down, and a load oscillating faster than the down-window never scales down.
* **Saturation.** A queue above target that grows (arrivals outrun completions by more than the
  tolerance) is capacity missing now, not a noisy sample: the scale-up skips the up-window and may
  double the fleet in one step (``max(max_step_up, capacity)``, the HPA's default 100 % policy). In
  the request-level simulation the up-window and the +4 step cost a burst 15 s to minutes, each
  second of it a queue that the new pods cannot take over.
* **Released load.** The down-window keeps capacity for load seen in it; a recommendation made at an
  arrival rate the fleet has not seen again (within the tolerance) for ``release_window_s`` no longer
  holds it, so a burst that ended is given back within one release window of its end, not a whole
  down-window. Never within the down-window of the last scale-up: reversing one that soon is a flap.
  Load that returns within the release window (an oscillation) still holds its peak.
* **Rising arrivals.** A scale-down is sized for the fleet's arrival rate one down-window ahead, at
  its least-squares trend over that window: undoing it within that window is a flap, and on a
  diurnal rise the count that is right now is short minutes later.
* **Panic.** When the mean demand over the short panic window reaches ``panic_threshold`` ×
  capacity, the up-window is skipped and scale-down is blocked for ``panic_hold_s``. Only load
  signals (KV usage, queue, TTFT) count as a burst: preemptions measure contention inside a
  replica, which a smaller ``max_num_seqs`` fixes in seconds (the budget tuner's job), so they
  scale up through the normal, stabilised path.
* **Limits.** At most ``max_step_up`` / ``max_step_down`` replicas per decision, then a clamp to
  ``[min_replicas, max_replicas]`` which always wins (a lowered ``max_replicas`` applies at once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from paged_operator.policy.fleet_view import FleetView

_EPS = 1e-9
#: Demand beyond this many replicas is the same answer (clamped to max_replicas anyway).
_MAX_DEMAND = 1e6
#: Signals that measure load arriving (a burst); preemptions are left out (see the module docstring).
BURST_SIGNALS = frozenset({"kv_cache_usage", "seq_budget_usage", "waiting_per_replica", "ttft_p95_seconds"})


class ScalingLimit(StrEnum):
    """Why the desired count is not what demand asked for (reported as the ``ScalingLimited`` condition)."""

    AT_MAX = "AtMaxReplicas"
    AT_MIN = "AtMinReplicas"
    INSUFFICIENT_RESOURCES = "InsufficientResources"  # set by ``controller_logic``: pods the scheduler cannot place


@dataclass(frozen=True)
class AutoscalingPolicySpec:
    """Autoscaler knobs. Times in seconds, rates per second per replica, utilisation as a 0–1 ratio.

    min_replicas / max_replicas: hard bounds on the replica count. With min 0 the fleet may scale to
        zero, but zero pods report no metrics: waking it up needs a signal from outside this policy
        (the controller scaling to 1 on traffic); here a fleet at zero stays at zero.
    target_kv_usage: KV-cache utilisation (used blocks / total) one replica should run at.
    target_waiting_per_replica: requests queued in one engine's scheduler that are acceptable.
    target_preemption_rate: recompute preemptions per second per replica that are acceptable.
    ttft_p95_slo_s: optional time-to-first-token p95 objective; None ignores TTFT.
    queue_drain_s: time in which replicas added for a queue above target should work off its excess.
    tolerance: relative dead band around capacity in which no change is made (0.1 = ±10 %).
    stabilization_window_up_s: a scale-up must be wanted for this long (the minimum recommendation
        over the window is taken). 0 acts on the latest sample. Skipped under saturation and in a panic.
    stabilization_window_down_s: a scale-down takes the maximum recommendation over this window.
    max_step_up / max_step_down: most replicas added / removed in one decision; under saturation (a
        growing queue) up to ``max(max_step_up, capacity)`` are added.
    panic_threshold: demand / capacity ratio, averaged over ``panic_window_s``, that declares a burst.
    panic_window_s: averaging window for burst detection.
    panic_hold_s: how long panic mode lasts after the last burst sample (no scale-down meanwhile).
    scale_down_memory_s: how long a count that a scale-down proved too small (it had to be undone
        within the down-window) stays the floor for later scale-downs.
    capacity_memory_s: how long a per-replica completion rate observed near the targets counts as
        what one replica serves (the ``arrival_rate`` signal's target); 0 turns that signal off.
    release_window_s: a down-window recommendation made at a fleet arrival rate above everything seen
        over this long (by more than ``tolerance``) no longer holds a scale-down, except within the
        down-window of the last scale-up; 0 keeps every recommendation for the whole down-window.
    dry_run: decide and report, but the controller must not change the replica count.
    """

    min_replicas: int = 1
    max_replicas: int = 10
    target_kv_usage: float = 0.75
    target_waiting_per_replica: float = 4.0
    target_preemption_rate: float = 0.5
    ttft_p95_slo_s: float | None = None
    queue_drain_s: float = 120.0
    tolerance: float = 0.1
    stabilization_window_up_s: float = 30.0
    stabilization_window_down_s: float = 300.0
    max_step_up: int = 4
    max_step_down: int = 1
    panic_threshold: float = 2.0
    panic_window_s: float = 30.0
    panic_hold_s: float = 60.0
    scale_down_memory_s: float = 3600.0
    capacity_memory_s: float = 3600.0
    release_window_s: float = 120.0
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ValueError(f"min_replicas must be non-negative, got {self.min_replicas}")
        if self.max_replicas < max(1, self.min_replicas):
            raise ValueError(
                f"max_replicas ({self.max_replicas}) must be at least 1 and at least min_replicas ({self.min_replicas})"
            )
        if not 0.0 < self.target_kv_usage <= 1.0:
            raise ValueError(f"target_kv_usage must be in (0, 1], got {self.target_kv_usage}")
        for name in ("target_waiting_per_replica", "target_preemption_rate", "panic_window_s", "queue_drain_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.ttft_p95_slo_s is not None and not self.ttft_p95_slo_s > 0:
            raise ValueError(f"ttft_p95_slo_s must be positive when set, got {self.ttft_p95_slo_s}")
        if not 0.0 <= self.tolerance < 1.0:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance}")
        for name in (
            "stabilization_window_up_s",
            "stabilization_window_down_s",
            "panic_hold_s",
            "scale_down_memory_s",
            "capacity_memory_s",
            "release_window_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if self.max_step_up < 1 or self.max_step_down < 1:
            raise ValueError(
                f"max_step_up and max_step_down must be at least 1, got {self.max_step_up}, {self.max_step_down}"
            )
        if not self.panic_threshold > 1.0:
            raise ValueError(f"panic_threshold must be greater than 1, got {self.panic_threshold}")

    @property
    def history_s(self) -> float:
        """How far back recommendations must be remembered."""
        return max(self.stabilization_window_up_s, self.stabilization_window_down_s, self.panic_window_s)

    def clamp(self, replicas: int) -> int:
        return min(self.max_replicas, max(self.min_replicas, replicas))


@dataclass(frozen=True)
class Recommendation:
    """One past evaluation: demand in replicas (unrounded; ``burst_demand`` from load signals only), the
    clamped replica count it asked for, and the fleet's arrival rate (requests/s; None before rates exist)."""

    time: float
    demand: float
    burst_demand: float
    replicas: int
    arrivals: float | None = None


@dataclass(frozen=True)
class AutoscalerState:
    """What the autoscaler remembers between decisions (kept by the controller, e.g. in kopf's memo).

    ``first_seen`` is the first evaluation with metrics: until a stabilisation window has been
    observed in full, the missing part counts as "keep the current count", so a restarted operator
    does not act on a few seconds of evidence. ``last_down`` / ``floor``: a scale-down that had to be
    undone within the down-window proved the smaller count too small (utilisation is not linear in
    load, so the projection was wrong); the count it came from becomes a floor for
    ``scale_down_memory_s``, which turns a would-be periodic flap into one correction; proven again
    for the same count after it expired, the floor is held twice as long (probes 1, 2, 4, ...
    hours apart with the default). The proof holds for the load it was made at: once demand falls
    more than ``tolerance`` below the largest demand of the down-window that scale-down was decided
    in (a diurnal trough after the peak), the floor no longer applies; a new undone scale-down sets a new one.
    ``capacity``: per-replica completion rates seen near the targets (``capacity_on_target``).
    ``last_up``: when the count last went up (no recommendation is released within the down-window after it).
    """

    history: tuple[Recommendation, ...] = ()
    panic_until: float | None = None
    first_seen: float | None = None
    last_down: tuple[float, int, int, float] | None = None  # (time, from, to, demand) of the last scale-down
    floor: int | None = None  # a count proved necessary by an undone scale-down ...
    floor_until: float | None = None  # ... and until when it holds
    floor_memory_s: float | None = None  # how long the last floor was held (doubles when re-proven)
    floor_demand: float | None = None  # the demand the failed scale-down was decided at
    capacity: tuple[tuple[float, float], ...] = ()  # (time, served/s per replica on target), rates decreasing
    last_up: float | None = None


@dataclass(frozen=True)
class Signal:
    """One signal's reading: ``value`` against ``target`` on ``ready`` replicas gives ``demand`` replicas."""

    name: str
    value: float
    target: float
    demand: float

    def describe(self, ready: int) -> str:
        op = ">" if self.value > self.target else "<" if self.value < self.target else "="
        return f"{self.name} {self.value:.3g} {op} target {self.target:.3g} on {ready} replicas"


@dataclass(frozen=True)
class ScaleDecision:
    """The autoscaler's answer. ``current`` is the capacity it started from (ready + starting)."""

    desired: int
    current: int
    reason: str
    signals: tuple[Signal, ...] = ()
    limited: ScalingLimit | None = None
    step_limited: bool = False
    panic: bool = False
    degraded: bool = False
    dry_run: bool = False

    @property
    def change(self) -> int:
        return self.desired - self.current


def compute_signals(
    spec: AutoscalingPolicySpec,
    view: FleetView,
    ready: int,
    starting: int = 0,
    *,
    served_on_target: float | None = None,
) -> tuple[Signal, ...]:
    """Per-signal demand in replicas on ``ready`` replicas; signals without data yet (rates, TTFT) are left out.

    ``served_on_target``: requests/s one replica was seen to serve on target (``capacity_on_target``);
    with it, the ``arrival_rate`` signal, capped at the current count (it only holds scale-downs).

    Preemptions are not proportional to missing capacity (they vanish once sequences fit), and while
    pods are starting they are expected on the pods carrying the load: so with pods starting their
    demand is capped at ready + starting (the credit), otherwise it is proportional and step-limited.
    TTFT gets the same cap: it includes queueing time, which grows while the new pods load.
    """
    usage_target = spec.target_kv_usage
    signals = [
        Signal("kv_cache_usage", view.kv_usage_mean, usage_target, ready * view.kv_usage_mean / usage_target),
        _queue_signal(spec, view, ready, starting, served_on_target),
    ]
    if view.seq_budget_usage is not None:
        slots = view.seq_budget_usage
        signals.append(Signal("seq_budget_usage", slots, usage_target, ready * slots / usage_target))
    rate = view.preemption_rate_per_replica
    if rate is not None:
        demand = ready * rate / spec.target_preemption_rate
        signals.append(
            Signal(
                "preemption_rate",
                rate,
                spec.target_preemption_rate,
                min(demand, ready + starting) if starting else demand,
            )
        )
    arrival = view.arrival_rate_per_replica
    if served_on_target and arrival is not None:
        # Measured, not projected: no scale-down headroom (``_replicas_for`` adds it to every demand, so divide it out).
        demand = min(ready * arrival / served_on_target / (1.0 + spec.tolerance), float(ready + starting))
        signals.append(Signal("arrival_rate", arrival, served_on_target, demand))
    if spec.ttft_p95_slo_s is not None and view.ttft_p95_s is not None:
        slo = spec.ttft_p95_slo_s
        demand = ready * view.ttft_p95_s / slo
        signals.append(
            Signal("ttft_p95_seconds", view.ttft_p95_s, slo, min(demand, ready + starting) if starting else demand)
        )
    return tuple(signals)


def _queue_signal(
    spec: AutoscalingPolicySpec, view: FleetView, ready: int, starting: int, served_on_target: float | None
) -> Signal:
    """Demand from the scheduler queues.

    A queue above target says *that* capacity is missing; its length says little about *how much*,
    since it keeps growing for as long as capacity is short (e.g. while new pods load the model), and
    reading it as ``ready × waiting / target`` overshoots badly. So:

    * below target: that ratio (at most the ready count, so it never asks for more);
    * above target, with completions observed: the fleet's arrival rate over what one replica serves
      (the rate one replica was seen to serve near the KV target, ``served_on_target``; before there is
      one, the fastest pod's completion rate: a saturated pod completes at capacity), plus enough to work
      off the median pod's excess backlog within ``queue_drain_s`` (a queue stuck on one engine
      cannot move to new replicas). A queue that grows needs ``arrival / served`` replicas however
      long it already is; one that no longer grows needs only the drain term. While pods are
      starting the drain term is left out: they will take their share of new arrivals, and the
      backlog is judged again once they serve;
    * above target without completions yet (first round): one replica more than are ready.
    """
    waiting, target = view.waiting_per_replica, spec.target_waiting_per_replica
    arrival, served = view.arrival_rate_per_replica, served_on_target or view.completion_rate_peak
    if waiting <= target:
        return Signal("waiting_per_replica", waiting, target, ready * waiting / target)
    if arrival is None or not served:
        # No completions observed yet (first round after a restart): more is needed, how much is unknown.
        return Signal("waiting_per_replica", waiting, target, ready + 1.0)
    backlog = max(0.0, view.waiting_median - target) * ready
    drain = backlog / (served * spec.queue_drain_s) if starting == 0 else 0.0
    return Signal("waiting_per_replica", waiting, target, ready * arrival / served + drain)


def capacity_on_target(
    spec: AutoscalingPolicySpec, known: tuple[tuple[float, float], ...], view: FleetView, now: float
) -> tuple[tuple[float, float], ...]:
    """Remember this view's per-replica served rate if the fleet ran on target, steadily (KV within the
    tolerance under its target, the queue at or under its own, arrivals matching completions, enough pods
    answering).

    Returns the rates still remembered, highest first: a monotonic queue, where a rate is dropped once a
    higher, newer one is seen, since it can no longer be the maximum.
    """
    kept = tuple((t, r) for t, r in known if t > now - spec.capacity_memory_s)
    # Steady state only (arrivals and completions within the tolerance of each other): completions overstate
    # what a replica serves while a backlog drains, and both understate it while new pods take their share.
    done, arriving = view.completion_rate_per_replica, view.arrival_rate_per_replica
    steady = done is not None and arriving is not None and abs(arriving - done) <= spec.tolerance * max(done, arriving)
    rate = min(done, arriving) if steady and done is not None and arriving is not None else None
    # Near the KV target only: a rate seen far below it says little about what a replica serves at the target
    # (and, as the signal's target, would pin an oversized fleet where it is).
    # Within the tolerance band, so the lower bound is as tight as the band the autoscaler keeps anyway.
    near = spec.target_kv_usage * (1.0 - spec.tolerance) <= view.kv_usage_mean <= spec.target_kv_usage
    on_target = near and view.waiting_per_replica <= spec.target_waiting_per_replica
    if spec.capacity_memory_s <= 0 or rate is None or not rate > 0 or not on_target or view.degraded:
        return kept
    return (*(k for k in kept if k[1] > rate), (now, rate))


def _fleet_arrivals(view: FleetView) -> float | None:
    rate = view.arrival_rate_per_replica
    return None if rate is None else rate * view.ready


def arrival_growth(history: Sequence[Recommendation], horizon_s: float) -> float:
    """Factor by which the fleet's arrival rate grows over ``horizon_s`` at its least-squares trend over
    ``history``; 1 when it is flat, falling, or there are fewer than three rates spanning half the horizon."""
    points = [(r.time, r.arrivals) for r in history if r.arrivals is not None]
    if len(points) < 3 or points[-1][0] - points[0][0] < horizon_s / 2:
        return 1.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_a = sum(a for _, a in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    slope = sum((t - mean_t) * (a - mean_a) for t, a in points) / var
    now_rate = mean_a + slope * (points[-1][0] - mean_t)
    if slope <= 0 or now_rate <= _EPS:
        return 1.0
    return (now_rate + slope * horizon_s) / now_rate


def released(window: list[Recommendation], recent: list[Recommendation], tolerance: float) -> list[Recommendation]:
    """The recommendations of ``window`` (oldest first) that still hold a scale-down: those made at a fleet arrival
    rate within ``tolerance`` of the highest one of ``recent`` (the release window's), and ``recent`` itself. One
    without a rate (the first decision after a restart: rates need two scrapes) is judged by the last rate before
    it, and kept when there is none. Without any rate in ``recent`` nothing is released.

    Invariants: the result is a non-empty subset of ``window`` (when ``window`` is non-empty) containing every
    recommendation of ``recent`` that is in ``window``, so a scale-down still waits for whatever the release
    window asked for.
    """
    rates = [r.arrivals for r in recent if r.arrivals is not None]
    if not rates:
        return window
    level = max(rates) * (1.0 + tolerance)
    kept, last = [], None
    for r in window:
        last = r.arrivals if r.arrivals is not None else last
        if last is None or last <= level or r in recent:
            kept.append(r)
    return kept or window


def saturated(spec: AutoscalingPolicySpec, view: FleetView) -> bool:
    """Requests wait above target and arrive faster than they complete: capacity is short now."""
    arriving, done = view.arrival_rate_per_replica, view.completion_rate_per_replica
    return (
        view.waiting_per_replica > spec.target_waiting_per_replica
        and arriving is not None
        and done is not None
        and arriving > done * (1.0 + spec.tolerance)
    )


def _replicas_for(demand: float, capacity: int, tolerance: float) -> int:
    """Round demand up to replicas, keeping the capacity when demand is within the tolerance band around it.

    A scale-down keeps ``tolerance`` headroom: utilisation is not linear in load near saturation (queues
    and preemptions grow faster than load), so a count projected to land exactly on target after the
    scale-down would land above it and scale back up: flapping.
    """
    demand = min(demand, _MAX_DEMAND)  # extreme rates (a pod that barely completes) must not overflow
    if capacity > 0 and abs(demand / capacity - 1.0) <= tolerance:
        return capacity
    if demand < capacity:
        return min(capacity, max(0, math.ceil(demand * (1.0 + tolerance) - _EPS)))
    return max(0, math.ceil(demand - _EPS))


def decide(
    spec: AutoscalingPolicySpec,
    state: AutoscalerState,
    view: FleetView | None,
    *,
    ready: int,
    starting: int,
    now: float,
) -> tuple[ScaleDecision, AutoscalerState]:
    """Decide the replica count for one evaluation; returns the decision and the state to keep for the next one.

    ``view`` is None when no ready pod answered; ``ready`` / ``starting`` count pods that are ready and
    pods that exist but are not ready yet (scheduled, pulling, loading weights).

    The target comes from the panic path or the stabilisation windows; then ``RULES`` adjust it in order.
    """
    if ready < 0 or starting < 0:
        raise ValueError(f"ready and starting replicas must be non-negative, got {ready} and {starting}")
    capacity = ready + starting
    panic_until = state.panic_until if state.panic_until is not None and state.panic_until > now else None
    if ready == 0 or view is None or view.reporting == 0:
        why = "no ready replicas" if ready == 0 else "no ready replica answered its metrics scrape"
        desired = spec.clamp(capacity)
        held = _finish(spec, capacity, desired, desired, f"{why}: holding at {desired}", degraded=ready > 0,
                       panic=panic_until is not None)  # fmt: skip
        return held, replace(state, panic_until=panic_until)

    c = _context(spec, state, view, ready=ready, starting=starting, now=now, panic_until=panic_until)
    target, notes = _panic_target(c) if c.panic_until is not None else _stabilised_target(c)
    changed_by: set[Rule] = set()
    for rule in RULES:
        adjusted, note = rule(c, target)
        if adjusted != target:
            changed_by.add(rule)
        if note is not None:
            notes.append(note)
        target = adjusted
    reason = f"{c.top.describe(ready)} → {c.raw}"
    if notes:
        reason += f"; {'; '.join(notes)}"
    return _finish(
        spec,
        capacity,
        target,
        _replicas_for(c.top.demand, capacity, spec.tolerance),
        reason,
        signals=c.signals,
        step_limited=_limit_the_step in changed_by,
        panic=c.panic_until is not None,
        degraded=view.degraded,
    ), _next_state(c, target)


def _within(history: Sequence[Recommendation], now: float, window_s: float) -> list[Recommendation]:
    """The recommendations of the last ``window_s``; the latest one at least."""
    return [r for r in history if r.time > now - window_s] or [history[-1]]


@dataclass(frozen=True)
class _Context:
    """What choosing the target and the rules after it see: this evaluation's inputs and what follows from them.

    ``top``: the signal with the largest demand, ``raw``: the (clamped) count it asks for; ``history``: the
    recommendations kept, this one last; ``panic_until``: set while a burst holds; ``floor``: the count an undone
    scale-down proved necessary, while it holds (until it expires, or load falls clearly below the level it was
    proven at); ``window_demand``: the largest demand of the down-window.
    """

    spec: AutoscalingPolicySpec
    state: AutoscalerState
    view: FleetView
    ready: int
    starting: int
    now: float
    capacity: int
    capacity_seen: tuple[tuple[float, float], ...]
    signals: tuple[Signal, ...]
    top: Signal
    raw: int
    burst_top: Signal | None
    burst_demand: float
    growing: bool
    history: tuple[Recommendation, ...]
    panic_until: float | None
    first_seen: float
    floor: int | None
    window_demand: float

    def within(self, window_s: float) -> list[Recommendation]:
        return _within(self.history, self.now, window_s)


def _context(
    spec: AutoscalingPolicySpec,
    state: AutoscalerState,
    view: FleetView,
    *,
    ready: int,
    starting: int,
    now: float,
    panic_until: float | None,
) -> _Context:
    capacity = ready + starting
    capacity_seen = capacity_on_target(spec, state.capacity, view, now)
    served = capacity_seen[0][1] if capacity_seen else None
    signals = compute_signals(spec, view, ready, starting, served_on_target=served)
    top = max(signals, key=lambda s: s.demand)
    raw = spec.clamp(_replicas_for(top.demand, capacity, spec.tolerance))
    load = [s for s in signals if s.name in BURST_SIGNALS]
    burst_top = max(load, key=lambda s: s.demand) if load else None
    burst_demand = burst_top.demand if burst_top else 0.0
    latest = Recommendation(
        time=now, demand=top.demand, burst_demand=burst_demand, replicas=raw, arrivals=_fleet_arrivals(view)
    )
    history = (*(r for r in state.history if r.time > now - spec.history_s), latest)
    recent = _within(history, now, spec.panic_window_s)
    if sum(r.burst_demand for r in recent) / len(recent) >= spec.panic_threshold * capacity:
        panic_until = now + spec.panic_hold_s
    floor = state.floor if state.floor_until is not None and now < state.floor_until else None
    window_demand = max(r.demand for r in _within(history, now, spec.stabilization_window_down_s))
    proven_at = state.floor_demand
    if floor is not None and proven_at is not None and window_demand < proven_at * (1 - spec.tolerance):
        floor = None  # load fell clearly below the level the floor was proven at
    return _Context(
        spec=spec,
        state=state,
        view=view,
        ready=ready,
        starting=starting,
        now=now,
        capacity=capacity,
        capacity_seen=capacity_seen,
        signals=signals,
        top=top,
        raw=raw,
        burst_top=burst_top,
        burst_demand=burst_demand,
        growing=saturated(spec, view),
        history=history,
        panic_until=panic_until,
        first_seen=state.first_seen if state.first_seen is not None else now,
        floor=floor,
        window_demand=window_demand,
    )


def _panic_target(c: _Context) -> tuple[int, list[str]]:
    """A burst: sized by the load signals (preemptions scale up only through the stabilised path), no scale-down."""
    target = max(c.capacity, c.spec.clamp(_replicas_for(c.burst_demand, c.capacity, c.spec.tolerance)))
    by = f" ({c.burst_top.name} asks for {target})" if c.burst_top else ""
    return target, [f"panic{by}: burst of demand, scaling up without waiting, no scale-down"]


def _stabilised_target(c: _Context) -> tuple[int, list[str]]:
    """Up: the smallest recommendation of the up-window (the latest one when the queue grows); down: the largest of
    the down-window, less those the release window no longer holds; the part of a window not observed yet since the
    first evaluation counts as the current count."""
    spec, now, capacity, raw = c.spec, c.now, c.capacity, c.raw
    up = raw if c.growing else min(r.replicas for r in c.within(spec.stabilization_window_up_s))
    window = c.within(spec.stabilization_window_down_s)
    just_up = c.state.last_up is not None and now - c.state.last_up < spec.stabilization_window_down_s
    held_for = window
    if spec.release_window_s > 0 and not just_up:
        # Recommendations made at a load not seen for the release window no longer hold capacity.
        held_for = released(window, c.within(spec.release_window_s), spec.tolerance)
    down = max(r.replicas for r in held_for)
    if now - c.first_seen < spec.stabilization_window_up_s:
        up = min(up, capacity)
    if now - c.first_seen < spec.stabilization_window_down_s:
        down = max(down, capacity)
    target = min(max(capacity, up), down)
    notes = []
    if raw > capacity and target < raw:
        notes.append(f"up-stabilisation over {spec.stabilization_window_up_s:g} s holds at {target}")
    elif raw < capacity and target > raw:
        notes.append(f"down-stabilisation over {spec.stabilization_window_down_s:g} s holds at {target}")
    if target < capacity and down < max(r.replicas for r in window):
        notes.append(f"arrivals of the down-window's peak not seen for {spec.release_window_s:g} s: released")
    return target, notes


Rule = Callable[[_Context, int], tuple[int, str | None]]
"""An adjustment of the target: the new target, and a note for the reason (None: nothing to say)."""


def _no_scale_down_on_a_partial_view(c: _Context, target: int) -> tuple[int, str | None]:
    """A partial view can hide load, not invent it."""
    if c.view.degraded and target < c.capacity:
        return c.capacity, f"only {c.view.reporting}/{c.ready} replicas reported: no scale-down"
    return target, None


def _no_scale_down_while_requests_wait(c: _Context, target: int) -> tuple[int, str | None]:
    """Unserved requests: removing capacity would hand queued work to fewer engines."""
    if target < c.capacity and c.view.waiting_per_replica > c.spec.target_waiting_per_replica:
        return c.capacity, "requests waiting above target: no scale-down"
    return target, None


def _hold_for_rising_arrivals(c: _Context, target: int) -> tuple[int, str | None]:
    """A scale-down must still hold when it could next be undone: size it for the rising load one down-window
    ahead (on a diurnal rise, a count right for now is short minutes later: a flap)."""
    window_s = c.spec.stabilization_window_down_s
    growth = arrival_growth(c.within(window_s), window_s)
    if target < c.capacity and growth > 1.0:
        ahead = c.spec.clamp(_replicas_for(c.top.demand * growth, c.capacity, c.spec.tolerance))
        if ahead > target:
            held = min(c.capacity, ahead)
            return held, f"arrivals rising ×{growth:.2f} over {window_s:g} s: held at {held}"
    return target, None


def _hold_at_the_floor(c: _Context, target: int) -> tuple[int, str | None]:
    """No scale-down below the count an undone scale-down proved necessary (``AutoscalerState``)."""
    if c.floor is not None and target < min(c.capacity, c.floor):
        held = min(c.capacity, c.floor)
        return held, f"a scale-down below {c.floor} was undone recently: held at {held}"
    return target, None


def _credit_starting_replicas(c: _Context, target: int) -> tuple[int, str | None]:
    """Say so when the pods on their way are why demand is met without adding more."""
    if c.starting and c.raw > c.ready and target == c.capacity:
        return target, f"{c.starting} starting replica(s) credited"
    return target, None


def _limit_the_step(c: _Context, target: int) -> tuple[int, str | None]:
    """At most ``max_step_up`` / ``max_step_down`` per decision; a growing queue may double the fleet."""
    step_up = max(c.spec.max_step_up, c.capacity) if c.growing else c.spec.max_step_up
    stepped = min(target, c.capacity + step_up) if target > c.capacity else target
    stepped = max(stepped, c.capacity - c.spec.max_step_down) if stepped < c.capacity else stepped
    return stepped, f"step limited to {stepped - c.capacity:+d}" if stepped != target else None


def _note_an_undone_scale_down(c: _Context, target: int) -> tuple[int, str | None]:
    """A scale-up that undoes the last scale-down leaves a floor behind (``_next_state`` keeps it)."""
    undone = _undone_scale_down(c, target)
    if undone is None:
        return target, None
    down_from, down_to, _, memory = undone
    return target, f"scale-down {down_from} → {down_to} undone: {down_from} is a floor for {memory:g} s"


#: The adjustments after the target is chosen, in the order they apply (and their notes appear).
RULES: tuple[Rule, ...] = (
    _no_scale_down_on_a_partial_view,
    _no_scale_down_while_requests_wait,
    _hold_for_rising_arrivals,
    _hold_at_the_floor,
    _credit_starting_replicas,
    _limit_the_step,
    _note_an_undone_scale_down,
)


def _undone_scale_down(c: _Context, desired: int) -> tuple[int, int, float, float] | None:
    """(from, to, demand, how long its floor holds) of the last scale-down when going to ``desired`` undoes it
    within the down-window; the floor is held twice as long when the same count is proven again."""
    last, memory = c.state.last_down, c.state.floor_memory_s
    if not desired > c.capacity or last is None:
        return None
    down_time, down_from, down_to, down_demand = last
    if down_to != c.capacity or c.now - down_time > c.spec.stabilization_window_down_s:
        return None
    again = c.state.floor == down_from and memory is not None  # kept after expiry: a re-proof doubles the memory
    return down_from, down_to, down_demand, 2 * memory if again and memory is not None else c.spec.scale_down_memory_s


def _next_state(c: _Context, desired: int) -> AutoscalerState:
    """What to remember after going to ``desired``: the windows, the panic, and the last scale-down with the floor
    it proved when undone."""
    state = c.state
    kept = AutoscalerState(
        history=c.history,
        panic_until=c.panic_until,
        first_seen=c.first_seen,
        last_down=(c.now, c.capacity, desired, c.window_demand) if desired < c.capacity else state.last_down,
        floor=state.floor,
        floor_until=state.floor_until,
        floor_memory_s=state.floor_memory_s,
        floor_demand=state.floor_demand,
        capacity=c.capacity_seen,
        last_up=c.now if desired > c.capacity else state.last_up,
    )
    undone = _undone_scale_down(c, desired)
    if undone is None:
        return kept
    down_from, _, down_demand, memory = undone
    return replace(
        kept,
        last_down=None,
        floor=down_from,
        floor_until=c.now + memory,
        floor_memory_s=memory,
        floor_demand=down_demand,
    )


def _finish(
    spec: AutoscalingPolicySpec,
    capacity: int,
    desired: int,
    wanted: int,
    reason: str,
    *,
    signals: tuple[Signal, ...] = (),
    step_limited: bool = False,
    panic: bool = False,
    degraded: bool = False,
) -> ScaleDecision:
    """Apply the hard clamp and name the limit when demand asked for more (or less) than the bounds allow."""
    final = spec.clamp(desired)
    limited = None
    if wanted > spec.max_replicas and final == spec.max_replicas:
        limited = ScalingLimit.AT_MAX
        reason += f"; at max_replicas {spec.max_replicas}"
    elif wanted < spec.min_replicas and final == spec.min_replicas:
        limited = ScalingLimit.AT_MIN
        reason += f"; at min_replicas {spec.min_replicas}"
    if final != desired:
        reason += f"; clamped {desired} → {final}"
    if spec.dry_run:
        reason = f"dry-run: {reason}"
    return ScaleDecision(
        desired=final,
        current=capacity,
        reason=reason,
        signals=signals,
        limited=limited,
        step_limited=step_limited,
        panic=panic,
        degraded=degraded,
        dry_run=spec.dry_run,
    )
