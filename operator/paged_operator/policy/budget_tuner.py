"""Budget tuner: a pure policy that adjusts the engines' scheduler budgets from the fleet view.

All pods of one ModelDeployment share one budget (``max_num_seqs``, ``max_num_batched_tokens``).
Changing it is instant and free compared with adding a replica, which is why it is tried first
for the problems it can fix (see ``arbiter``).

``max_num_seqs`` (how many requests run concurrently) is AIMD, like TCP congestion control:

* **Lower multiplicatively** on a preemption storm — preemption rate above threshold *and* the
  fullest pod's KV usage at or above the high-water mark. Too many running sequences compete for
  KV blocks and the engine recomputes evicted ones, wasting compute; fewer sequences fit.
* **Raise additively** when requests wait without preemptions and memory has room: every pod's
  KV usage is below the low-water mark, or the budget itself binds (running sequences at
  ``BUDGET_BOUND_FRACTION`` of ``max_num_seqs`` or more) and KV usage is below the high-water mark.
  The second case matters: a budget that caps the batch keeps KV usage just where it is, so
  waiting for the low-water mark would leave the queue to the autoscaler, whose replicas would
  each be held back by the same cap. While the budget binds with KV below the low-water mark the
  raise goes in one step to the budget projected to bring KV usage to that mark (KV usage grows
  with the running batch), not by ``increase_step`` per cool-down.
* **Hysteresis**: between the water marks nothing changes, every change is followed by a cool-down
  (time for the fleet to show its effect), and after a storm the level that caused it is
  remembered for ``storm_memory_s``: raises stop one step below it instead of sawing back into it.

``max_num_batched_tokens`` (tokens per engine step, i.e. how much prefill rides along with decodes)
trades TTFT against ITL, so it moves only against latency objectives, when set:

* **Raise** (× ``batched_tokens_factor``) when TTFT p95 is above its SLO, requests wait and KV usage
  is below the high-water mark: bigger prefill chunks drain the queue faster.
* **Lower** (÷ the factor) when ITL p95 is above its SLO: decodes stall behind long prefill chunks.
* When both objectives are missed the fleet is short of capacity, not mis-tuned: leave it to the
  autoscaler rather than flip-flop. For the same reason the level at which ITL broke is remembered
  for ``storm_memory_s``: a later TTFT raise stops below it (TTFT is then the autoscaler's).

One change per decision, in this priority: storm, idle memory, TTFT, ITL. ``max_num_batched_tokens``
never goes below ``max_num_seqs`` (every running sequence needs at least one token per step), and no proposal
exceeds the live limits the engines report (``BudgetSpec.within``): the budgets are the engine contract's
``Budgets``, so a proposal that broke either rule could not even be built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from paged_platform.engine_contract.budgets import BudgetLimits, Budgets

from paged_operator.policy.fleet_view import FleetView

#: Running sequences per replica at or above this share of ``max_num_seqs`` mean the budget binds.
BUDGET_BOUND_FRACTION = 0.9


@dataclass(frozen=True)
class BudgetSpec:
    """Tuner knobs. Rates per second per replica, KV usage as a 0–1 ratio, times in seconds.

    min_num_seqs / max_num_seqs: bounds for ``max_num_seqs``.
    min_num_batched_tokens / max_num_batched_tokens: bounds for ``max_num_batched_tokens``.
    kv_high_water: KV usage at or above which preemptions count as a storm (lower the budget).
    kv_low_water: KV usage below which memory is idle (raise the budget if requests wait).
    preemption_rate_threshold: preemptions per second per replica that make a storm.
    min_waiting_per_replica: waiting requests per replica that count as "requests wait".
    decrease_factor: multiplier for ``max_num_seqs`` on a storm, in (0, 1).
    increase_step: sequences added per raise.
    batched_tokens_factor: multiplier (raise) / divisor (lower) for ``max_num_batched_tokens``, > 1.
    ttft_p95_slo_s / itl_p95_slo_s: latency objectives steering ``max_num_batched_tokens``; None: left alone.
    cooldown_s: minimum time between two changes.
    storm_memory_s: how long the level that caused a storm (or broke ITL) caps later raises.
    """

    min_num_seqs: int = 8
    max_num_seqs: int = 256
    min_num_batched_tokens: int = 512
    max_num_batched_tokens: int = 8192
    kv_high_water: float = 0.90
    kv_low_water: float = 0.60
    preemption_rate_threshold: float = 0.1
    min_waiting_per_replica: float = 1.0
    decrease_factor: float = 0.75
    increase_step: int = 8
    batched_tokens_factor: float = 2.0
    ttft_p95_slo_s: float | None = None
    itl_p95_slo_s: float | None = None
    cooldown_s: float = 60.0
    storm_memory_s: float = 600.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_num_seqs <= self.max_num_seqs:
            raise ValueError(f"need 1 <= min_num_seqs ({self.min_num_seqs}) <= max_num_seqs ({self.max_num_seqs})")
        if not self.min_num_batched_tokens <= self.max_num_batched_tokens:
            raise ValueError(
                f"min_num_batched_tokens ({self.min_num_batched_tokens}) must not exceed max_num_batched_tokens "
                f"({self.max_num_batched_tokens})"
            )
        if self.max_num_batched_tokens < self.min_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least min_num_seqs "
                f"({self.min_num_seqs})"
            )
        if not 0.0 < self.kv_low_water < self.kv_high_water <= 1.0:
            raise ValueError(f"need 0 < kv_low_water ({self.kv_low_water}) < kv_high_water ({self.kv_high_water}) <= 1")
        if not 0.0 < self.decrease_factor < 1.0:
            raise ValueError(f"decrease_factor must be in (0, 1), got {self.decrease_factor}")
        if self.increase_step < 1:
            raise ValueError(f"increase_step must be at least 1, got {self.increase_step}")
        if not self.batched_tokens_factor > 1.0:
            raise ValueError(f"batched_tokens_factor must be greater than 1, got {self.batched_tokens_factor}")
        for name in ("preemption_rate_threshold", "min_waiting_per_replica", "cooldown_s", "storm_memory_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        for name in ("ttft_p95_slo_s", "itl_p95_slo_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive when set, got {value}")

    def within(self, limits: BudgetLimits | None) -> BudgetSpec:
        """These knobs with the upper bounds lowered to what the engines accept live (None: unknown, unchanged)."""
        if limits is None:
            return self
        seqs_max = min(self.max_num_seqs, limits.max_num_seqs)
        tokens_max = min(self.max_num_batched_tokens, limits.max_num_batched_tokens)
        return replace(
            self,
            min_num_seqs=min(self.min_num_seqs, seqs_max, tokens_max),
            max_num_seqs=seqs_max,
            min_num_batched_tokens=min(self.min_num_batched_tokens, tokens_max),
            max_num_batched_tokens=tokens_max,
        )

    def clamp(self, budgets: Budgets) -> Budgets:
        """Budgets moved into the bounds, keeping ``max_num_batched_tokens >= max_num_seqs``."""
        seqs = min(self.max_num_seqs, max(self.min_num_seqs, budgets.max_num_seqs))
        tokens = min(self.max_num_batched_tokens, max(self.min_num_batched_tokens, budgets.max_num_batched_tokens))
        return Budgets(min(seqs, tokens), tokens)


class TuneKind(StrEnum):
    LOWER_SEQS = "LowerMaxNumSeqs"
    RAISE_SEQS = "RaiseMaxNumSeqs"
    RAISE_TOKENS = "RaiseMaxNumBatchedTokens"
    LOWER_TOKENS = "LowerMaxNumBatchedTokens"
    CLAMP = "ClampToBounds"


@dataclass(frozen=True)
class TunerState:
    """The budgets in force and the tuner's memory; committed by the controller only when a change is applied."""

    budgets: Budgets
    last_change: float | None = None
    storm_level: int | None = None
    storm_until: float | None = None
    itl_level: int | None = None  # max_num_batched_tokens at which ITL last broke its objective ...
    itl_until: float | None = None  # ... remembered until then: TTFT raises stay below it

    def cooldown_left(self, spec: BudgetSpec, now: float) -> float:
        """Seconds until the tuner may change again; positive means it is "mid-adjustment"."""
        return 0.0 if self.last_change is None else max(0.0, spec.cooldown_s - (now - self.last_change))


@dataclass(frozen=True)
class TuneDecision:
    """A proposed change (``budgets`` is None when there is none) and why."""

    budgets: Budgets | None
    reason: str
    kind: TuneKind | None = None


def initial_state(spec: BudgetSpec, budgets: Budgets) -> TunerState:
    """State for a fleet starting with ``budgets`` (e.g. read back from the ConfigMap), moved into the bounds."""
    return TunerState(budgets=spec.clamp(budgets))


def decide(spec: BudgetSpec, state: TunerState, view: FleetView | None, now: float) -> TuneDecision:
    """Propose at most one budget change for this evaluation."""
    current = state.budgets
    clamped = spec.clamp(current)
    if clamped != current:
        return TuneDecision(
            clamped,
            f"budgets {current.describe()} outside the bounds (the spec's, within the engines' live limits) → "
            f"{clamped.describe()}",
            TuneKind.CLAMP,
        )
    if view is None:
        return TuneDecision(None, "no metrics: budgets unchanged")
    if view.preemption_rate_per_replica is None:
        return TuneDecision(None, "no preemption rate yet (needs two samples): budgets unchanged")
    left = state.cooldown_left(spec, now)
    if left > 0:
        return TuneDecision(None, f"cooling down after the last change ({left:.0f} s left)")

    # The fullest pod's KV: preemptions happen only where KV is full, and one pod thrashing (uneven load)
    # shows that the shared budget is too high for it; raising needs every pod to have room.
    rate, kv, waiting = view.preemption_rate_per_replica, view.kv_usage_max, view.waiting_per_replica
    seqs, tokens = current.max_num_seqs, current.max_num_batched_tokens
    idle_note = ""
    if rate > spec.preemption_rate_threshold and kv >= spec.kv_high_water:
        why = (
            f"preemptions {rate:.3g}/s per replica > {spec.preemption_rate_threshold:g} with KV usage "
            f"{kv:.2f} >= {spec.kv_high_water:g}"
        )
        lowered = max(spec.min_num_seqs, math.floor(seqs * spec.decrease_factor))
        if lowered == seqs:
            return TuneDecision(None, f"{why}, but max_num_seqs is at its lower bound {spec.min_num_seqs}")
        return TuneDecision(Budgets(lowered, tokens), f"{why}: max_num_seqs {seqs} → {lowered}", TuneKind.LOWER_SEQS)

    bound = view.running_per_replica >= BUDGET_BOUND_FRACTION * seqs
    roomy = kv < spec.kv_low_water or (bound and kv < spec.kv_high_water)
    if roomy and waiting >= spec.min_waiting_per_replica and rate <= spec.preemption_rate_threshold:
        why = (
            f"KV usage {kv:.2f} < {spec.kv_low_water:g}"
            if kv < spec.kv_low_water
            else f"max_num_seqs {seqs} binds ({view.running_per_replica:.3g} running per replica) with KV usage "
            f"{kv:.2f} < {spec.kv_high_water:g}"
        ) + f" and {waiting:.3g} requests waiting per replica"
        ceiling = seq_ceiling(spec, state, now)
        wanted = seqs + spec.increase_step
        if bound and kv < spec.kv_low_water:
            # KV usage grows with the running batch: jump straight to where it would reach the low-water mark
            # (all the way to the ceiling when KV is nearly empty: the projection is unbounded there).
            projected = seqs * spec.kv_low_water / kv if kv > 0 else math.inf
            wanted = max(wanted, ceiling if projected >= ceiling else math.floor(projected + 1e-9))
        raised = min(ceiling, wanted)
        if raised > seqs:
            return TuneDecision(Budgets(raised, tokens), f"{why}: max_num_seqs {seqs} → {raised}", TuneKind.RAISE_SEQS)
        # Memory idles but the sequence budget cannot grow: say so, and try the token budget.
        idle_note = f"{why}, but max_num_seqs {seqs} is at its ceiling {ceiling}; "

    ttft_missed = (
        spec.ttft_p95_slo_s is not None and view.ttft_p95_s is not None and view.ttft_p95_s > spec.ttft_p95_slo_s
    )
    itl_missed = spec.itl_p95_slo_s is not None and view.itl_p95_s is not None and view.itl_p95_s > spec.itl_p95_slo_s
    if ttft_missed and itl_missed:
        return TuneDecision(None, "TTFT and ITL objectives both missed: short of capacity, not a budget problem")
    if ttft_missed and waiting >= spec.min_waiting_per_replica and kv < spec.kv_high_water:
        raised = min(spec.max_num_batched_tokens, math.ceil(tokens * spec.batched_tokens_factor))
        remembered = state.itl_level is not None and state.itl_until is not None and now < state.itl_until
        if remembered and state.itl_level is not None and raised >= state.itl_level:
            # Back up to where ITL broke would only flip-flop: TTFT is the autoscaler's now.
            idle_note += f"TTFT p95 above SLO, but ITL broke at max_num_batched_tokens {state.itl_level}; "
            raised = tokens
        if raised > tokens:
            return TuneDecision(
                Budgets(seqs, raised),
                f"TTFT p95 {view.ttft_p95_s:.3g} s > SLO {spec.ttft_p95_slo_s:g} s with requests waiting: "
                f"max_num_batched_tokens {tokens} → {raised}",
                TuneKind.RAISE_TOKENS,
            )
    if itl_missed:
        lowered = max(spec.min_num_batched_tokens, seqs, math.floor(tokens / spec.batched_tokens_factor))
        if lowered < tokens:
            return TuneDecision(
                Budgets(seqs, lowered),
                f"ITL p95 {view.itl_p95_s:.3g} s > SLO {spec.itl_p95_slo_s:g} s: "
                f"max_num_batched_tokens {tokens} → {lowered}",
                TuneKind.LOWER_TOKENS,
            )
    return TuneDecision(
        None,
        f"{idle_note}budgets {current.describe()} unchanged: KV usage {kv:.2f}, preemptions {rate:.3g}/s per replica",
    )


def seq_ceiling(spec: BudgetSpec, state: TunerState, now: float) -> int:
    """The highest ``max_num_seqs`` the tuner would raise to now: its bound, the token budget, and one step
    below a remembered storm."""
    ceiling = min(spec.max_num_seqs, state.budgets.max_num_batched_tokens)
    if state.storm_level is not None and state.storm_until is not None and now < state.storm_until:
        ceiling = min(ceiling, state.storm_level - spec.increase_step)
    return ceiling


def applied(spec: BudgetSpec, state: TunerState, decision: TuneDecision, now: float) -> TunerState:
    """The state after the controller applied ``decision`` (a storm remembers the level it happened at)."""
    if decision.budgets is None:
        return state
    storm_level, storm_until = state.storm_level, state.storm_until
    itl_level, itl_until = state.itl_level, state.itl_until
    if decision.kind is TuneKind.LOWER_SEQS:
        storm_level, storm_until = state.budgets.max_num_seqs, now + spec.storm_memory_s
    if decision.kind is TuneKind.LOWER_TOKENS:
        itl_level, itl_until = state.budgets.max_num_batched_tokens, now + spec.storm_memory_s
    return TunerState(decision.budgets, now, storm_level, storm_until, itl_level, itl_until)
