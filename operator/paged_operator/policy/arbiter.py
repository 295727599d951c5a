"""Arbiter: when the autoscaler and the budget tuner both want to act, which one does.

At most one action per decision per ModelDeployment, so the effect of each is observable on its
own. The rule, first match wins:

====  =====================================================  ==========================================
rule  situation                                              verdict
====  =====================================================  ==========================================
R1    tuner proposes a change, autoscaler wants to scale up  tune first (instant, free, reversible),
                                                             unless scale-up has been deferred for
                                                             ``max_scale_up_deferral_s`` → scale
R2    tuner proposes a change, no scale-up wanted            tune; a wanted scale-down is dropped
R3    tuner mid-adjustment (in its cool-down), scale-up      in panic (a burst) after a lowering → scale
                                                             now; otherwise defer, to see whether the
                                                             change fixed it, unless deferred too long
                                                             → scale
R4    tuner mid-adjustment, scale-down                       hold: the metrics still reflect the old
                                                             budget, so the scale-down may be wrong
R5    otherwise, the autoscaler wants a change               scale
R6    nothing wanted                                         none
====  =====================================================  ==========================================

Why tune first: a preemption storm with KV near full is fixed in seconds by running fewer
sequences, and idle KV with a queue behind a binding ``max_num_seqs`` by running more, while a new
replica takes minutes to load. If the change was not enough the queue keeps growing, the
autoscaler keeps asking, and the scale-up happens once the tuner's cool-down shows it (or, at the
latest, ``max_scale_up_deferral_s`` after it was first wanted). A burst (panic) behind a lowered
budget waits at most one decision: a storm at full KV means memory is short, so the scale-up
follows at the next decision without waiting for the cool-down. Behind a *raise* it waits for the
cool-down: the raise added capacity on every pod at once, and the burst was measured (as arrivals
over completions) against the old, smaller batch, so it is overstated until the change shows.
Scale-down is never urgent, so it always yields.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from paged_platform.engine_contract.budgets import Budgets

from paged_operator.policy.autoscaler import ScaleDecision
from paged_operator.policy.budget_tuner import TuneDecision, TuneKind

#: Budget changes that add capacity on every pod at once: a burst measured before them is overstated.
RAISES = frozenset({TuneKind.RAISE_SEQS, TuneKind.RAISE_TOKENS})


class Action(StrEnum):
    NONE = "None"
    SCALE = "Scale"
    TUNE = "Tune"


@dataclass(frozen=True)
class ArbiterSpec:
    """max_scale_up_deferral_s: longest time (seconds) a wanted scale-up may wait behind budget tuning."""

    max_scale_up_deferral_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_scale_up_deferral_s < 0:
            raise ValueError(f"max_scale_up_deferral_s must be non-negative, got {self.max_scale_up_deferral_s}")


@dataclass(frozen=True)
class ArbiterState:
    """``up_deferred_since``: when a still-wanted scale-up was first deferred (None when none is waiting);
    ``last_tune``: the kind of the last budget change this arbiter let through."""

    up_deferred_since: float | None = None
    last_tune: TuneKind | None = None


@dataclass(frozen=True)
class Verdict:
    action: Action
    rule: str
    reason: str
    replicas: int | None = None
    budgets: Budgets | None = None


def arbitrate(
    spec: ArbiterSpec,
    state: ArbiterState,
    scale: ScaleDecision,
    tune: TuneDecision,
    *,
    tuner_cooling: bool,
    now: float,
) -> tuple[Verdict, ArbiterState]:
    """Pick the one action for this decision. ``tuner_cooling``: the tuner changed budgets within its cool-down."""
    wants_up, wants_down = scale.change > 0, scale.change < 0
    since = state.up_deferred_since if wants_up else None
    if wants_up and since is None:
        since = now
    overdue = wants_up and since is not None and now - since >= spec.max_scale_up_deferral_s

    last = state.last_tune

    def scale_to(rule: str, why: str) -> tuple[Verdict, ArbiterState]:
        verdict = Verdict(Action.SCALE, rule, f"{why}: {scale.reason}", replicas=scale.desired)
        return verdict, ArbiterState(last_tune=last)

    def defer(rule: str, why: str) -> tuple[Verdict, ArbiterState]:
        waited = now - since if since is not None else 0.0
        return (
            Verdict(Action.NONE, rule, f"{why}; scale-up to {scale.desired} deferred {waited:.0f} s"),
            ArbiterState(since, last),
        )

    if tune.budgets is not None:
        if overdue:
            return scale_to("R1", f"scale-up deferred {spec.max_scale_up_deferral_s:g} s behind budget tuning")
        verdict = Verdict(Action.TUNE, "R1" if wants_up else "R2", _tune_reason(tune, scale), budgets=tune.budgets)
        return verdict, ArbiterState(since, tune.kind)
    if tuner_cooling and wants_up:
        if scale.panic and last not in RAISES:
            return scale_to("R3", "burst: scaling up without waiting for the budget change to settle")
        if overdue:
            return scale_to("R3", f"budget change did not suffice within {spec.max_scale_up_deferral_s:g} s")
        return defer("R3", "waiting for the last budget change to take effect")
    if tuner_cooling and wants_down:
        why = f"no scale-down while a budget change settles: {scale.reason}"
        return Verdict(Action.NONE, "R4", why), ArbiterState(last_tune=last)
    if scale.change != 0:
        return scale_to("R5", "scaling")
    return Verdict(Action.NONE, "R6", f"{tune.reason}; {scale.reason}"), ArbiterState(last_tune=last)


def _tune_reason(tune: TuneDecision, scale: ScaleDecision) -> str:
    if scale.change > 0:
        return f"tuning before scaling up to {scale.desired}: {tune.reason}"
    if scale.change < 0:
        return f"tuning; scale-down to {scale.desired} dropped: {tune.reason}"
    return tune.reason
