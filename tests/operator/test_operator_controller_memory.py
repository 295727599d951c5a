"""The policies' memory in ``status.controllerMemory``: read back as written, unreadable text starts afresh, its size
is bounded, and an operator restarted from it decides as if it had never stopped."""

from __future__ import annotations

import json

import pytest
from operator_fleet_sim import burst_trace, simulate, square_trace, step_trace
from operator_views import view
from paged_operator.policy import budget_tuner
from paged_operator.policy import memory as controller_memory
from paged_operator.policy.arbiter import ArbiterState
from paged_operator.policy.autoscaler import AutoscalerState, AutoscalingPolicySpec, Recommendation
from paged_operator.policy.budget_tuner import BudgetSpec, TuneKind, TunerState
from paged_operator.policy.controller import ControllerSpec, ControllerState, initial_state
from paged_operator.policy.fleet_view import SampleWindow
from paged_operator.policy.scale_to_zero import ZeroState
from paged_platform.api import ModelDeploymentStatus
from paged_platform.engine_contract.budgets import Budgets

SPEC = ControllerSpec(
    autoscaling=AutoscalingPolicySpec(max_replicas=12, panic_window_s=20),
    budget=BudgetSpec(min_num_seqs=8, max_num_seqs=128),
)
FITS = Budgets(36, 2048)
NOW = 1_764_580_000.25


def full_state() -> ControllerState:
    """A state with every remembered field set."""
    history = tuple(
        Recommendation(NOW - 15 * i, 2.5 + i / 7, 1.25 + i / 3, 3 + i % 2, None if i > 18 else 9.5 + i / 9)
        for i in range(20, 0, -1)
    )
    scaler = AutoscalerState(
        history=history,
        panic_until=NOW + 40.5,
        first_seen=NOW - 900,
        last_down=(NOW - 100, 4, 3, 3.71),
        floor=4,
        floor_until=NOW + 3500,
        floor_memory_s=3600.0,
        floor_demand=3.71,
        capacity=((NOW - 600, 4.4), (NOW - 30, 4.1)),
        last_up=NOW - 200,
    )
    tuner = TunerState(
        Budgets(48, 2048), NOW - 20, storm_level=64, storm_until=NOW + 580, itl_level=4096, itl_until=NOW
    )
    arbiter = ArbiterState(up_deferred_since=NOW - 45, last_tune=TuneKind.LOWER_SEQS)
    zero = ZeroState(arrivals_total=1234.0, last_active=NOW - 42)
    return ControllerState(SampleWindow(horizon_s=SPEC.rate_window_s), scaler, tuner, arbiter, zero)


def test_read_back_as_written() -> None:
    state = full_state()
    assert controller_memory.decode(controller_memory.encode(state), rate_window_s=SPEC.rate_window_s) == state


def test_history_rows_written_before_arrival_rates_were_kept_still_read() -> None:
    body = json.loads(controller_memory.encode(full_state()))
    body["autoscaler"]["history"] = [row[:4] for row in body["autoscaler"]["history"]]
    state = controller_memory.decode(json.dumps(body), rate_window_s=SPEC.rate_window_s)
    assert state is not None
    assert [r.arrivals for r in state.autoscaler.history] == [None] * 20
    assert [r.replicas for r in state.autoscaler.history] == [r.replicas for r in full_state().autoscaler.history]


def test_fresh_state_round_trips_and_fits_the_status_field() -> None:
    state = initial_state(SPEC, FITS)
    text = controller_memory.encode(state)
    assert controller_memory.decode(text, rate_window_s=SPEC.rate_window_s) == state
    status = ModelDeploymentStatus(controller_memory=text)
    assert status.to_wire()["controllerMemory"] == text


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[1, 2]", '{"v": 999}', '{"v": 1}', json.dumps({"v": 1, "autoscaler": {}, "tuner": None})],
)
def test_unreadable_memory_starts_afresh(text: str | None) -> None:
    assert controller_memory.decode(text, rate_window_s=30) is None
    assert controller_memory.restore(SPEC, FITS, text) == initial_state(SPEC, FITS)


def test_memory_with_impossible_budgets_is_unreadable() -> None:
    body = json.loads(controller_memory.encode(full_state()))
    body["tuner"]["maxNumBatchedTokens"] = 1  # below maxNumSeqs: Budgets refuses it
    assert controller_memory.decode(json.dumps(body), rate_window_s=30) is None


def test_size_is_bounded_by_dropping_the_oldest_recommendations() -> None:
    history = tuple(Recommendation(NOW + i, 1.0 / 3 + i, 2.0 / 3, i) for i in range(5000))
    state = full_state()
    state = ControllerState(state.window, AutoscalerState(history=history), state.tuner, state.arbiter)
    text = controller_memory.encode(state)
    assert len(text) <= controller_memory.MAX_CHARS
    kept = controller_memory.decode(text, rate_window_s=30)
    assert kept is not None and 0 < len(kept.autoscaler.history) < len(history)
    assert kept.autoscaler.history == history[-len(kept.autoscaler.history) :]


def test_restore_keeps_the_tuner_only_for_the_budgets_in_force() -> None:
    text = controller_memory.encode(full_state())
    assert controller_memory.restore(SPEC, Budgets(48, 2048), text).tuner == full_state().tuner
    moved = controller_memory.restore(SPEC, Budgets(64, 4096), text)  # someone set other budgets meanwhile
    assert moved.tuner == budget_tuner.initial_state(SPEC.budget, Budgets(64, 4096))  # type: ignore[arg-type]
    assert moved.autoscaler == full_state().autoscaler
    static = ControllerSpec(autoscaling=SPEC.autoscaling, budget=None)
    assert controller_memory.restore(static, Budgets(48, 2048), text).tuner is None


def test_a_restarted_tuner_does_not_raise_back_into_a_known_storm() -> None:
    """Storm at 64 seqs, lowered to 48: with requests waiting and KV roomy, raises stop one step below 64."""
    spec = SPEC.budget
    assert spec is not None
    roomy = view(kv=0.5, waiting=6.0, preempt=0.0)

    def raises(tuner: TunerState | None, now: float) -> list[int]:
        """Where the tuner's raises take max_num_seqs, one decision per cool-down."""
        assert tuner is not None
        seen = []
        for _ in range(3):
            now += spec.cooldown_s
            decision = budget_tuner.decide(spec, tuner, roomy, now)
            if decision.budgets is None:
                break
            tuner = budget_tuner.applied(spec, tuner, decision, now)
            seen.append(decision.budgets.max_num_seqs)
        return seen

    restored = controller_memory.restore(SPEC, Budgets(48, 2048), controller_memory.encode(full_state()))
    assert raises(restored.tuner, NOW) == [56]
    assert raises(initial_state(SPEC, Budgets(48, 2048)).tuner, NOW) == [56, 64, 72]  # back into the storm


def restarts_every(period_s: float, *, remember: bool):
    """An operator restarted every ``period_s``: from its status memory, or from nothing."""

    def restart(t: float, state: ControllerState, budgets: Budgets) -> ControllerState | None:
        if t % period_s:
            return None
        if remember:
            return controller_memory.restore(SPEC, budgets, controller_memory.encode(state))
        return initial_state(SPEC, budgets)

    return restart


@pytest.mark.parametrize(
    ("trace", "budgets"),
    [
        (burst_trace(2, 12, at=300, length=300), FITS),
        (square_trace(4, 10, period=120), FITS),
        (step_trace(2, 12, at=300), Budgets(128, 2048)),  # a preemption storm the tuner fixes
        (lambda t: 8.0, Budgets(8, 2048)),  # a binding budget the tuner raises
    ],
)
def test_restarts_from_memory_decide_as_an_operator_that_never_stopped(trace, budgets: Budgets) -> None:  # type: ignore[no-untyped-def]
    kw = {"duration_s": 2400, "replicas": 1, "budgets": budgets}
    steady = simulate(SPEC, trace, **kw)
    restarted = simulate(SPEC, trace, restarts=restarts_every(170, remember=True), **kw)
    assert restarted.replicas() == steady.replicas()
    assert [t.budgets for t in restarted.ticks] == [t.budgets for t in steady.ticks]


def test_an_operator_restarted_within_every_down_window_still_scales_down() -> None:
    """Without memory each restart waits a whole down-window again: restarted more often, it never scales down."""
    kw = {"duration_s": 2400, "replicas": 1, "budgets": FITS}
    burst = burst_trace(2, 12, at=300, length=300)
    remembered = simulate(SPEC, burst, restarts=restarts_every(170, remember=True), **kw)
    forgotten = simulate(SPEC, burst, restarts=restarts_every(170, remember=False), **kw)
    assert max(remembered.replicas()) > remembered.ticks[-1].replicas == 1
    assert forgotten.ticks[-1].replicas == max(forgotten.replicas()) > 1
