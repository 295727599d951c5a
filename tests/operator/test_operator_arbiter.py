"""The arbiter's rule, tested as a table (one row per rule), plus the deferral bound over time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_operator.policy.arbiter import Action, ArbiterSpec, ArbiterState, arbitrate
from paged_operator.policy.autoscaler import ScaleDecision
from paged_operator.policy.budget_tuner import TuneDecision, TuneKind
from paged_platform.engine_contract.budgets import Budgets

SPEC = ArbiterSpec(max_scale_up_deferral_s=120)
LOWER = TuneDecision(Budgets(48, 2048), "storm: max_num_seqs 64 → 48", TuneKind.LOWER_SEQS)
RAISE = TuneDecision(Budgets(72, 2048), "idle KV: max_num_seqs 64 → 72", TuneKind.RAISE_SEQS)
NO_TUNE = TuneDecision(None, "budgets fit")


def scale(current: int, desired: int, *, panic: bool = False) -> ScaleDecision:
    return ScaleDecision(desired=desired, current=current, reason=f"demand → {desired}", panic=panic)


UP, DOWN, HOLD, PANIC = scale(3, 5), scale(3, 2), scale(3, 3), scale(3, 7, panic=True)
LONG_AGO = ArbiterState(up_deferred_since=0.0)  # with now=200: deferred 200 s > 120 s


@pytest.mark.parametrize(
    ("rule", "scale_d", "tune", "cooling", "state", "action", "replicas", "budgets"),
    [
        ("R1", UP, LOWER, False, ArbiterState(), Action.TUNE, None, LOWER.budgets),
        ("R1", UP, RAISE, False, ArbiterState(), Action.TUNE, None, RAISE.budgets),
        ("R1", PANIC, LOWER, False, ArbiterState(), Action.TUNE, None, LOWER.budgets),
        ("R1", UP, RAISE, False, LONG_AGO, Action.SCALE, 5, None),
        ("R2", DOWN, RAISE, False, ArbiterState(), Action.TUNE, None, RAISE.budgets),
        ("R2", HOLD, LOWER, False, ArbiterState(), Action.TUNE, None, LOWER.budgets),
        ("R3", UP, NO_TUNE, True, ArbiterState(), Action.NONE, None, None),
        ("R3", PANIC, NO_TUNE, True, ArbiterState(last_tune=TuneKind.LOWER_SEQS), Action.SCALE, 7, None),
        ("R3", PANIC, NO_TUNE, True, ArbiterState(last_tune=TuneKind.RAISE_SEQS), Action.NONE, None, None),
        ("R3", UP, NO_TUNE, True, LONG_AGO, Action.SCALE, 5, None),
        ("R4", DOWN, NO_TUNE, True, ArbiterState(), Action.NONE, None, None),
        ("R5", UP, NO_TUNE, False, ArbiterState(), Action.SCALE, 5, None),
        ("R5", PANIC, NO_TUNE, False, ArbiterState(), Action.SCALE, 7, None),
        ("R5", DOWN, NO_TUNE, False, ArbiterState(), Action.SCALE, 2, None),
        ("R6", HOLD, NO_TUNE, False, ArbiterState(), Action.NONE, None, None),
        ("R6", HOLD, NO_TUNE, True, ArbiterState(), Action.NONE, None, None),
    ],
)
def test_rule_table(rule, scale_d, tune, cooling, state, action, replicas, budgets) -> None:
    verdict, _ = arbitrate(SPEC, state, scale_d, tune, tuner_cooling=cooling, now=200.0)
    assert (verdict.rule, verdict.action, verdict.replicas, verdict.budgets) == (rule, action, replicas, budgets)
    assert verdict.reason


def test_deferral_is_bounded_over_time() -> None:
    """Tuning may delay a wanted scale-up, but never by more than max_scale_up_deferral_s."""
    state, t = ArbiterState(), 0.0
    actions = []
    while t <= 300:
        tune = RAISE if int(t) % 60 == 0 else NO_TUNE  # the tuner proposes every cool-down
        verdict, state = arbitrate(SPEC, state, UP, tune, tuner_cooling=tune is NO_TUNE, now=t)
        actions.append((t, verdict.action))
        if verdict.action is Action.SCALE:
            break
        t += 10
    assert actions[-1] == (120.0, Action.SCALE)
    assert [a for _, a in actions[:-1]].count(Action.TUNE) == 2  # t=0 and t=60


def test_a_burst_waits_at_most_one_decision() -> None:
    verdict, state = arbitrate(SPEC, ArbiterState(), PANIC, LOWER, tuner_cooling=False, now=0)
    assert verdict.action is Action.TUNE
    verdict, _ = arbitrate(SPEC, state, PANIC, NO_TUNE, tuner_cooling=True, now=10)
    assert verdict.action is Action.SCALE and verdict.replicas == 7


def test_a_burst_behind_a_raise_waits_for_the_cool_down_but_not_past_the_bound() -> None:
    verdict, state = arbitrate(SPEC, ArbiterState(), PANIC, RAISE, tuner_cooling=False, now=0)
    assert verdict.action is Action.TUNE and state.last_tune is TuneKind.RAISE_SEQS
    verdict, state = arbitrate(SPEC, state, PANIC, NO_TUNE, tuner_cooling=True, now=10)
    assert verdict.action is Action.NONE and "deferred 10 s" in verdict.reason
    verdict, _ = arbitrate(SPEC, state, PANIC, NO_TUNE, tuner_cooling=True, now=120)
    assert verdict.action is Action.SCALE


def test_deferral_clock_resets_when_scale_up_is_no_longer_wanted() -> None:
    _, state = arbitrate(SPEC, ArbiterState(), UP, RAISE, tuner_cooling=False, now=0)
    assert state.up_deferred_since == 0
    _, state = arbitrate(SPEC, state, HOLD, NO_TUNE, tuner_cooling=True, now=10)
    assert state.up_deferred_since is None
    _, state = arbitrate(SPEC, state, UP, NO_TUNE, tuner_cooling=True, now=20)
    assert state.up_deferred_since == 20


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="max_scale_up_deferral_s must be non-negative, got -1"):
        ArbiterSpec(max_scale_up_deferral_s=-1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["lower", "raise", "none"]), st.booleans(), st.booleans()), min_size=1))
def test_a_wanted_scale_up_never_waits_past_the_bound(ticks: list[tuple[str, bool, bool]]) -> None:
    """Whatever the tuner proposes tick after tick, a scale-up wanted throughout happens within the bound."""
    proposals = {"lower": LOWER, "raise": RAISE, "none": NO_TUNE}
    state, waited_since = ArbiterState(), 0.0
    for i, (proposal, cooling, panic) in enumerate(ticks):
        now = i * 10.0
        verdict, state = arbitrate(
            SPEC, state, PANIC if panic else UP, proposals[proposal], tuner_cooling=cooling, now=now
        )
        if verdict.action is Action.SCALE:
            waited_since = now + 10.0
        else:
            assert now - waited_since < SPEC.max_scale_up_deferral_s
