"""The whole decision (collect → autoscaler → tuner → arbiter → plan) on scrape rounds."""

from __future__ import annotations

from dataclasses import replace

import pytest
from paged_operator.policy.arbiter import Action
from paged_operator.policy.autoscaler import AutoscalingPolicySpec
from paged_operator.policy.budget_tuner import BudgetSpec
from paged_operator.policy.controller import ControllerSpec, ControllerState, Observation, decide, initial_state
from paged_operator.policy.fleet_view import EngineSample
from paged_platform.engine_contract.budgets import BudgetLimits, Budgets

SCALE = AutoscalingPolicySpec(
    min_replicas=1, max_replicas=8, stabilization_window_up_s=0, stabilization_window_down_s=60, max_step_up=2
)
BUDGET = BudgetSpec(min_num_seqs=8, max_num_seqs=128, cooldown_s=30)
START = Budgets(64, 2048)


def pod_sample(pod: str, t: float, *, kv: float, waiting: float = 0, preempted: float = 0, seqs: int = 64):
    return EngineSample(
        time=t,
        pod=pod,
        kv_usage=kv,
        running=8,
        waiting=waiting,
        preemptions_total=preempted,
        max_num_seqs=seqs,
        max_num_batched_tokens=2048,
    )


def rounds(spec: ControllerSpec, state: ControllerState, observations: list[Observation]):
    """Decide on each observation in turn; the plans and the final state."""
    plans = []
    for o in observations:
        plan, state = decide(spec, state, o)
        plans.append(plan)
    return plans, state


def obs(t: float, pods: dict[str, dict], *, ready: tuple[str, ...] | None = None, starting: int = 0, failures=None):
    return Observation(
        time=t,
        ready_pods=ready if ready is not None else tuple(pods),
        starting=starting,
        samples=tuple(pod_sample(p, t, **kw) for p, kw in pods.items()),
        failures=failures or {},
    )


def test_high_kv_scales_up_with_a_reason_and_conditions() -> None:
    spec = ControllerSpec(autoscaling=SCALE, budget=None)
    (plan,), _ = rounds(spec, initial_state(spec, None), [obs(0, {"a": {"kv": 0.95}, "b": {"kv": 0.95}})])
    assert plan.replicas == 3 and plan.budgets is None and plan.verdict.rule == "R5"
    assert "kv_cache_usage 0.95 > target 0.75 on 2 replicas → 3" in plan.verdict.reason
    assert {c.type: c.status for c in plan.conditions} == {"Degraded": "False", "ScalingLimited": "False"}


def test_silent_pods_degrade_and_block_scale_down() -> None:
    spec = ControllerSpec(autoscaling=SCALE, budget=None, min_reporting_fraction=0.5)
    state = initial_state(spec, None)
    quiet = [
        obs(t, {"a": {"kv": 0.05}}, ready=("a", "b", "c"), failures={"b": "no answer within 2 s"})
        for t in range(0, 200, 10)
    ]
    plans, _ = rounds(spec, state, quiet)
    assert all(p.replicas is None for p in plans)
    degraded = next(c for c in plans[-1].conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "MetricsUnavailable"
    assert "1/3 ready replicas answered" in degraded.message and "b: no answer within 2 s" in degraded.message
    assert "c: no sample" in degraded.message


def test_samples_from_pods_no_longer_ready_are_ignored() -> None:
    spec = ControllerSpec(autoscaling=SCALE, budget=None)
    o = obs(0, {"a": {"kv": 0.5}, "gone": {"kv": 1.0, "waiting": 50}}, ready=("a",))
    (plan,), _ = rounds(spec, initial_state(spec, None), [o])
    assert plan.view is not None and plan.view.reporting == 1 and plan.replicas is None


def test_storm_tunes_first_then_scales_if_still_needed() -> None:
    spec = ControllerSpec(autoscaling=SCALE, budget=BUDGET)
    state = initial_state(spec, START)
    pods = ("a", "b")

    def storm(t: float, seqs: int, preempted: float) -> Observation:
        return obs(t, {p: {"kv": 0.97, "preempted": preempted, "seqs": seqs} for p in pods})

    plans, state = rounds(spec, state, [storm(0, 64, 0), storm(10, 64, 20)])
    tuned = plans[1]
    assert tuned.verdict.action is Action.TUNE and tuned.verdict.rule == "R1"
    assert tuned.budgets == Budgets(48, 2048) and tuned.push_budgets_to == pods and tuned.replicas is None
    assert state.tuner is not None and state.tuner.budgets == Budgets(48, 2048)
    # The storm goes on at the lower budget: scale-up waits out the tuner's cool-down, then happens.
    plans, state = rounds(spec, state, [storm(t, 48, 20 + t * 2) for t in (20, 30)])
    assert [p.verdict.rule for p in plans] == ["R3", "R3"] and all(p.replicas is None for p in plans)
    (plan,), state = rounds(spec, state, [storm(40, 48, 100)])
    assert plan.verdict.action is Action.TUNE  # cool-down over: the tuner goes again first (48 → 36)
    assert plan.budgets == Budgets(36, 2048)


def test_drifted_pods_get_the_budget_again() -> None:
    spec = ControllerSpec(autoscaling=None, budget=BUDGET)
    o = obs(0, {"a": {"kv": 0.7, "seqs": 64}, "new": {"kv": 0.7, "seqs": 32}})
    silent_budget = replace(pod_sample("old-engine", 0, kv=0.7), max_num_seqs=None, max_num_batched_tokens=None)
    o = replace(o, ready_pods=(*o.ready_pods, "old-engine"), samples=(*o.samples, silent_budget))
    (plan,), _ = rounds(spec, initial_state(spec, START), [o])
    assert plan.budgets is None and plan.target_budgets == START and plan.push_budgets_to == ("new",)
    assert plan.scale is None and [c.type for c in plan.conditions] == ["Degraded"]


def test_dry_run_reports_but_does_not_scale_or_block_the_tuner() -> None:
    dry = AutoscalingPolicySpec(**{**SCALE.__dict__, "dry_run": True})
    spec = ControllerSpec(autoscaling=dry, budget=BUDGET)
    state = initial_state(spec, START)
    busy = {"kv": 0.3, "waiting": 40}
    plans, _ = rounds(spec, state, [obs(0, {"a": busy}), obs(10, {"a": busy})])
    # No completions reported: the queue asks for one more replica than ready.
    assert plans[1].scale is not None and plans[1].scale.desired == 2 and plans[1].scale.dry_run
    assert plans[1].replicas is None
    assert plans[1].verdict.action is Action.TUNE and plans[1].budgets == Budgets(72, 2048)


def test_nothing_enabled_nothing_done() -> None:
    spec = ControllerSpec(autoscaling=None, budget=None)
    (plan,), _ = rounds(spec, initial_state(spec, None), [obs(0, {"a": {"kv": 1.0, "waiting": 99}})])
    assert (plan.replicas, plan.budgets, plan.push_budgets_to, plan.verdict.action) == (None, None, (), Action.NONE)


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="needs the starting budgets"):
        initial_state(ControllerSpec(autoscaling=None, budget=BUDGET), None)
    without_tuner = initial_state(ControllerSpec(autoscaling=SCALE, budget=None), None)
    with pytest.raises(ValueError, match="rebuild it with initial_state"):
        decide(ControllerSpec(autoscaling=SCALE, budget=BUDGET), without_tuner, obs(0, {"a": {"kv": 0.5}}))
    with pytest.raises(ValueError, match="rate_window_s must be positive, got 0"):
        ControllerSpec(autoscaling=None, budget=None, rate_window_s=0)
    with pytest.raises(ValueError, match=r"min_reporting_fraction must be in \(0, 1\], got 1.5"):
        ControllerSpec(autoscaling=None, budget=None, min_reporting_fraction=1.5)


def test_scaling_limited_at_max() -> None:
    capped = AutoscalingPolicySpec(**{**SCALE.__dict__, "max_replicas": 2})
    spec = ControllerSpec(autoscaling=capped, budget=None)
    (plan,), _ = rounds(spec, initial_state(spec, None), [obs(0, {"a": {"kv": 1.0}, "b": {"kv": 1.0}})])
    limited = next(c for c in plan.conditions if c.type == "ScalingLimited")
    assert (limited.status, limited.reason) == ("True", "AtMaxReplicas") and "at max_replicas 2" in limited.message
    assert plan.replicas is None


def test_binding_budget_counts_as_capacity_while_a_storm_caps_the_tuner() -> None:
    """Slots are measured against what the tuner could raise to: its bound, or one step below a remembered storm."""
    spec = ControllerSpec(autoscaling=SCALE, budget=BUDGET)

    def seq_demand(state: ControllerState) -> float:
        samples = tuple(
            replace(pod_sample(p, 0.0, kv=0.7, waiting=2), running=64) for p in ("a", "b")
        )  # the budget of 64 binds
        plan, _ = decide(spec, state, Observation(0.0, ("a", "b"), 0, samples))
        assert plan.scale is not None
        return next(s.demand for s in plan.scale.signals if s.name == "seq_budget_usage")

    free = initial_state(spec, START)
    assert seq_demand(free) == pytest.approx(2 * (64 / 128) / SCALE.target_kv_usage)  # the tuner's to raise
    assert free.tuner is not None
    stormed = replace(free, tuner=replace(free.tuner, storm_level=72, storm_until=600.0))  # raises stop at 64
    assert seq_demand(stormed) == pytest.approx(2 * 1.0 / SCALE.target_kv_usage)  # replicas' to add


def test_unschedulable_replicas_stop_the_scale_up_and_say_why() -> None:
    spec = ControllerSpec(autoscaling=SCALE, budget=None)
    hot = {"a": {"kv": 0.99}, "b": {"kv": 0.99}}
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    state = initial_state(spec, None)
    plans, _ = rounds(spec, state, [obs(0, hot), obs(10, hot)])
    assert plans[-1].replicas is not None and plans[-1].replicas > 2  # schedulable: scales up

    stuck = replace(obs(10, hot), unschedulable={"m-x": message})
    plans, _ = rounds(spec, state, [obs(0, hot), stuck])
    plan = plans[-1]
    assert plan.replicas is None  # more pods would only wait with the one that cannot be placed
    limited = next(c for c in plan.conditions if c.type == "ScalingLimited")
    assert (limited.status, limited.reason) == ("True", "InsufficientResources")
    assert "1 replica(s) cannot be scheduled" in limited.message and message in limited.message

    cold = {"a": {"kv": 0.05}, "b": {"kv": 0.05}}  # a scale-down is still allowed (after the down-window)
    later = [replace(obs(t, cold), unschedulable={"m-x": message}) for t in range(0, 200, 10)]
    plans, _ = rounds(spec, initial_state(spec, None), later)
    assert any(p.replicas is not None and p.replicas < 2 for p in plans)


def with_limits(o: Observation, limits: BudgetLimits) -> Observation:
    return replace(o, samples=tuple(replace(s, limits=limits) for s in o.samples))


def test_the_tuner_stays_within_the_live_limits_the_engines_report() -> None:
    """An engine started with lower live limits (before the spec raised its bounds) takes no more: a budget in
    force above them is clamped down first (never pushed and refused), and raises stop at the limit."""
    spec = ControllerSpec(autoscaling=None, budget=BUDGET)
    busy = {"kv": 0.3, "waiting": 40}
    limits = BudgetLimits(70, 1024)
    (plan,), _ = rounds(spec, initial_state(spec, START), [with_limits(obs(0, {"a": busy}), limits)])
    assert plan.view is not None and plan.view.budget_limits == limits
    assert plan.verdict.action is Action.TUNE and plan.budgets == Budgets(64, 1024)
    assert plan.tune is not None and "outside the bounds" in plan.tune.reason
    start = Budgets(64, 1024)
    plans, _ = rounds(spec, initial_state(spec, start), [with_limits(obs(t, {"a": busy}), limits) for t in (0, 10)])
    assert plans[1].budgets == Budgets(70, 1024)  # idle KV with a queue wants 72: the engines take 70


def test_the_fleet_accepts_what_every_engine_accepts() -> None:
    spec = ControllerSpec(autoscaling=None, budget=None)
    o = obs(0, {"a": {"kv": 0.5}, "b": {"kv": 0.5}, "old": {"kv": 0.5}})
    reported = {"a": BudgetLimits(256, 32768), "b": BudgetLimits(512, 16384)}
    o = replace(o, samples=tuple(replace(s, limits=reported.get(s.pod)) for s in o.samples))
    (plan,), _ = rounds(spec, initial_state(spec, None), [o])
    assert plan.view is not None and plan.view.budget_limits == BudgetLimits(256, 16384)
