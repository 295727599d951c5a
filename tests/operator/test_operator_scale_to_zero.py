"""Scale to zero and back: wake only on requests the router holds, sleep only after ``idle_s`` with nothing arriving,
waiting or running; what the routers report, parsed; and the whole decision with the autoscaler."""

from __future__ import annotations

import pytest
from operator_exposition import exposition
from paged_operator.clients import router_demand
from paged_operator.policy import scale_to_zero
from paged_operator.policy.arbiter import Action
from paged_operator.policy.autoscaler import AutoscalingPolicySpec
from paged_operator.policy.controller import ControllerSpec, Observation, decide, initial_state
from paged_operator.policy.engine_series import parse_exposition
from paged_operator.policy.scale_to_zero import RouterDemand, ZeroDecision, ZeroSpec, ZeroState

SPEC = ZeroSpec(idle_s=300)


def run(demands: list[tuple[float, RouterDemand | None, int, bool]]) -> list[ZeroDecision]:
    """(time, demand, capacity, busy) per decision, from a fresh state."""
    state, out = ZeroState(), []
    for now, demand, capacity, busy in demands:
        decision, state = scale_to_zero.decide(SPEC, state, demand, capacity=capacity, busy=busy, now=now)
        out.append(decision)
    return out


def test_a_fleet_at_zero_wakes_only_on_held_requests() -> None:
    quiet, held = RouterDemand(0, 10), RouterDemand(2, 12)
    asleep, woken, blind = run([(0, quiet, 0, False), (15, held, 0, False), (30, None, 0, False)])
    assert asleep.replicas == 0 and woken.replicas == 1 and "2 request(s) held" in woken.reason
    assert blind.replicas == 0  # no router answer: nothing to wake for


def test_sleeps_after_idle_seconds_without_arrivals() -> None:
    steady = RouterDemand(0, 40)
    decisions = run([(t, steady, 1, False) for t in range(0, 331, 15)])
    first_sleep = next(i for i, d in enumerate(decisions) if d.replicas == 0) * 15
    assert first_sleep == 300  # the idle clock starts at the first observation
    assert all(d.replicas is None for d in decisions[: first_sleep // 15])


ACTIVE_AT = 195  # a multiple of the 15 s interval


@pytest.mark.parametrize(
    "activity",
    [
        lambda t: (RouterDemand(0, 40 if t < ACTIVE_AT else 41), False),  # one arrival
        lambda t: (RouterDemand(1 if t == ACTIVE_AT else 0, 40), False),  # a request held
        lambda t: (RouterDemand(0, 40), t == ACTIVE_AT),  # a request running on the engines
        lambda t: (RouterDemand(0, 40 if t < ACTIVE_AT else 3), False),  # a restarted router, counting again
    ],
    ids=["arrival", "held", "running", "router-restart"],
)
def test_any_activity_restarts_the_idle_clock(activity) -> None:  # type: ignore[no-untyped-def]
    decisions = run([(t, *activity(t)[:1], 1, activity(t)[1]) for t in range(0, 601, 15)])
    first_sleep = next(i for i, d in enumerate(decisions) if d.replicas == 0) * 15
    assert first_sleep == ACTIVE_AT + SPEC.idle_s


def test_never_sleeps_blind() -> None:
    decisions = run([(0, RouterDemand(0, 1), 1, False), *[(t, None, 1, False) for t in range(15, 900, 15)]])
    assert all(d.replicas is None for d in decisions)


def test_router_metrics_are_summed_over_labels() -> None:
    text = (
        '# TYPE paged_router_queue_depth gauge\npaged_router_queue_depth{model_name="a"} 2.0\n'
        'paged_router_queue_depth{model_name="b"} 1.0\n# TYPE paged_router_arrivals counter\n'
        'paged_router_arrivals_total{model_name="a"} 7.0\npaged_router_arrivals_total{model_name="unknown"} 1.0\n'
    )
    assert router_demand.parse(text) == RouterDemand(3, 8)


def test_the_whole_decision_wakes_holds_and_sleeps() -> None:
    """With scale-to-zero on, the autoscaler never goes below one replica itself; zero is the idle policy's."""
    spec = ControllerSpec(autoscaling=AutoscalingPolicySpec(min_replicas=1, max_replicas=4), budget=None, zero=SPEC)
    state = initial_state(spec, None)
    at_zero = Observation(time=0.0, ready_pods=(), starting=0, samples=(), router=RouterDemand(0, 5))
    plan, state = decide(spec, state, at_zero)
    assert plan.replicas is None and plan.verdict.action is Action.NONE  # the autoscaler's 1 is not taken
    held = Observation(time=15.0, ready_pods=(), starting=0, samples=(), router=RouterDemand(1, 6))
    plan, state = decide(spec, state, held)
    assert plan.replicas == 1 and plan.verdict.rule == "Z"
    idle = exposition(kv=0.0, running=0, waiting=0)
    for t in range(30, 400, 15):
        sample = parse_exposition(idle, pod="p0", time=float(t))
        obs = Observation(time=float(t), ready_pods=("p0",), starting=0, samples=(sample,), router=RouterDemand(0, 6))
        plan, state = decide(spec, state, obs)
        if plan.replicas == 0:
            break
    assert plan.replicas == 0 and t >= 15 + SPEC.idle_s and "scaling to zero" in plan.verdict.reason
