"""One autoscaling/tuning decision for one ModelDeployment, as a pure function.

The kopf timer stays thin: it scrapes (``scrape``), calls ``decide`` with the observation and the
state it kept from last time, performs the plan (patch the Deployment's replicas, write the budgets
to the ConfigMap and push them to pods through the admin API, set status conditions) and keeps the
returned state. Everything that can be wrong about *what* to do is here and unit-tested; the
handler only has to get *doing* it right.

Pipeline: samples → ``SampleWindow`` → ``FleetView`` → autoscaler and tuner proposals → arbiter →
``Plan``. Each policy's state advances only as far as reality did: the autoscaler always records
what it saw (its windows are about observations), the tuner commits a change only when the arbiter
chose it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from paged_platform.engine_contract.budgets import Budgets

from paged_operator.policy import autoscaler, budget_tuner, scale_to_zero
from paged_operator.policy.arbiter import Action, ArbiterSpec, ArbiterState, Verdict, arbitrate
from paged_operator.policy.autoscaler import AutoscalerState, AutoscalingPolicySpec, ScaleDecision, ScalingLimit
from paged_operator.policy.budget_tuner import BudgetSpec, TuneDecision, TunerState
from paged_operator.policy.fleet_view import EngineSample, FleetView, SampleWindow, fleet_view, is_degraded
from paged_operator.policy.scale_to_zero import RouterDemand, ZeroSpec, ZeroState


@dataclass(frozen=True)
class ControllerSpec:
    """Everything one deployment's decisions depend on.

    autoscaling: None disables the autoscaler (the replica count is left to the user's spec).
    budget: None disables the budget tuner.
    zero: scale to zero when idle and back on held requests (``scale_to_zero``); None: off. With it on, the
        autoscaler's own lower bound is at least 1: going to zero is ``scale_to_zero``'s decision alone.
    rate_window_s: window (seconds) for counter rates and latency quantiles.
    min_reporting_fraction: share of ready pods that must answer a scrape; below it the deployment is
        ``Degraded`` and the autoscaler does not scale down.
    """

    autoscaling: AutoscalingPolicySpec | None
    budget: BudgetSpec | None
    arbiter: ArbiterSpec = field(default_factory=ArbiterSpec)
    zero: ZeroSpec | None = None
    rate_window_s: float = 30.0
    min_reporting_fraction: float = 0.5

    def __post_init__(self) -> None:
        if not self.rate_window_s > 0:
            raise ValueError(f"rate_window_s must be positive, got {self.rate_window_s}")
        if not 0.0 < self.min_reporting_fraction <= 1.0:
            raise ValueError(f"min_reporting_fraction must be in (0, 1], got {self.min_reporting_fraction}")


@dataclass(frozen=True)
class ControllerState:
    """State carried between decisions; ``initial_state`` builds the first one."""

    window: SampleWindow
    autoscaler: AutoscalerState
    tuner: TunerState | None
    arbiter: ArbiterState
    zero: ZeroState = field(default_factory=ZeroState)


def initial_state(spec: ControllerSpec, budgets: Budgets | None) -> ControllerState:
    """First state. ``budgets``: the budgets pods start with (from the ConfigMap); needed when the tuner is on."""
    if spec.budget is not None and budgets is None:
        raise ValueError("the budget tuner needs the starting budgets (max_num_seqs, max_num_batched_tokens)")
    tuner = budget_tuner.initial_state(spec.budget, budgets) if spec.budget is not None and budgets else None
    return ControllerState(
        window=SampleWindow(horizon_s=spec.rate_window_s),
        autoscaler=AutoscalerState(),
        tuner=tuner,
        arbiter=ArbiterState(),
    )


@dataclass(frozen=True)
class Observation:
    """One scrape round: who is ready, who is starting, what answered and what did not (pod → error).

    ``unschedulable``: pods the scheduler has not placed for too long (pod → its message). They are not in
    ``starting``: no capacity is on its way from them.
    ``router``: what the ModelDeployment's routers hold and received (None: no router, or none answered).
    """

    time: float
    ready_pods: tuple[str, ...]
    starting: int
    samples: tuple[EngineSample, ...]
    failures: Mapping[str, str] = field(default_factory=dict)
    unschedulable: Mapping[str, str] = field(default_factory=dict)
    router: RouterDemand | None = None


@dataclass(frozen=True)
class Condition:
    """A status condition in Kubernetes' shape (``status`` is "True"/"False")."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What the handler must do now.

    replicas: new Deployment replica count, or None to leave it.
    budgets: new budgets to write to the ConfigMap, or None.
    push_budgets_to: pods whose engines must receive ``target_budgets`` through the admin API: every
        ready pod after a change, otherwise the pods that report different budgets (started from an
        older ConfigMap, or an earlier push failed).
    """

    replicas: int | None
    budgets: Budgets | None
    target_budgets: Budgets | None
    push_budgets_to: tuple[str, ...]
    verdict: Verdict
    scale: ScaleDecision | None
    tune: TuneDecision | None
    view: FleetView | None
    conditions: tuple[Condition, ...]


_HOLD = TuneDecision(None, "budget tuner disabled")


def decide(spec: ControllerSpec, state: ControllerState, obs: Observation) -> tuple[Plan, ControllerState]:
    """Run the whole decision for one observation; returns the plan and the state to keep.

    When the spec changes (tuner switched on, new bounds) keep the state: bounds are applied by the
    policies themselves; only a tuner switched on needs ``initial_state`` for its starting budgets.
    """
    if spec.budget is not None and state.tuner is None:
        raise ValueError("the budget tuner is enabled but the state has no budgets: rebuild it with initial_state()")
    ready = len(obs.ready_pods)
    ready_set = set(obs.ready_pods)
    samples = tuple(s for s in obs.samples if s.pod in ready_set)
    window = state.window.add(samples, obs.time)
    view = fleet_view(
        window,
        samples,
        ready=ready,
        now=obs.time,
        rate_window_s=spec.rate_window_s,
        min_reporting_fraction=spec.min_reporting_fraction,
    )

    scale: ScaleDecision | None = None
    scaler_state = state.autoscaler
    if spec.autoscaling is not None:
        scale, scaler_state = autoscaler.decide(
            spec.autoscaling,
            state.autoscaler,
            _slots_at_tuner_bound(spec, state, view, obs.time),
            ready=ready,
            starting=obs.starting,
            now=obs.time,
        )
    capacity = ready + obs.starting
    if scale is not None and obs.unschedulable and scale.desired > capacity:
        scale = _no_more_than_schedules(scale, obs.unschedulable, capacity)
    hold = ScaleDecision(desired=capacity, current=capacity, reason="autoscaling disabled")
    competing = scale if scale is not None and not scale.dry_run else hold

    tune = _HOLD
    cooling = False
    if spec.budget is not None and state.tuner is not None:  # (checked above; narrows the type)
        tuner_spec = spec.budget.within(view.budget_limits if view is not None else None)
        tune = budget_tuner.decide(tuner_spec, state.tuner, view, obs.time)
        cooling = state.tuner.cooldown_left(spec.budget, obs.time) > 0
    verdict, arbiter_state = arbitrate(
        spec.arbiter, state.arbiter, competing, tune, tuner_cooling=cooling, now=obs.time
    )

    zero_state = state.zero
    if spec.zero is not None:
        busy = view is not None and (view.running_per_replica > 0 or view.waiting_per_replica > 0)
        zero, zero_state = scale_to_zero.decide(
            spec.zero, state.zero, obs.router, capacity=capacity, busy=busy, now=obs.time
        )
        if zero.replicas is not None:
            dry = scale is not None and scale.dry_run
            scale = ScaleDecision(desired=zero.replicas, current=capacity, reason=zero.reason, dry_run=dry)
            if zero.replicas != capacity and not dry:
                verdict = Verdict(Action.SCALE, "Z", zero.reason, zero.replicas)
            else:
                verdict = Verdict(Action.NONE, "Z", zero.reason)

    tuner_state = state.tuner
    if verdict.action is Action.TUNE and spec.budget is not None and tuner_state is not None:
        tuner_state = budget_tuner.applied(spec.budget, tuner_state, tune, obs.time)
    target = tuner_state.budgets if tuner_state is not None else None
    if verdict.action is Action.TUNE:
        push = obs.ready_pods
    elif target is not None and view is not None:
        # A pod that does not export its budgets is not known to differ: it is not pushed every decision.
        push = tuple(
            pod
            for pod, (seqs, tokens) in sorted(view.budgets.items())
            if (seqs, tokens) != (None, None) and (seqs, tokens) != (target.max_num_seqs, target.max_num_batched_tokens)
        )
    else:
        push = ()

    plan = Plan(
        replicas=verdict.replicas if verdict.action is Action.SCALE else None,
        budgets=verdict.budgets if verdict.action is Action.TUNE else None,
        target_budgets=target,
        push_budgets_to=push,
        verdict=verdict,
        scale=scale,
        tune=tune if spec.budget is not None else None,
        view=view,
        conditions=_conditions(spec, obs, view, scale),
    )
    new_state = replace(
        state, window=window, autoscaler=scaler_state, tuner=tuner_state, arbiter=arbiter_state, zero=zero_state
    )
    return plan, new_state


def _no_more_than_schedules(scale: ScaleDecision, unschedulable: Mapping[str, str], capacity: int) -> ScaleDecision:
    """No scale-up while replicas already asked for cannot be scheduled: more would only wait with them.

    The pending pods are kept (a cluster autoscaler adds nodes for pending pods, and they take the load
    once placed); a scale-down is left alone (the ReplicaSet removes unscheduled pods first).
    """
    pod, message = sorted(unschedulable.items())[0]
    why = (
        f"{len(unschedulable)} replica(s) cannot be scheduled, so none is added for a wanted {scale.desired} "
        f"({pod}: {message})"
    )
    return replace(
        scale, desired=capacity, limited=ScalingLimit.INSUFFICIENT_RESOURCES, reason=f"{scale.reason}; {why}"
    )


def _slots_at_tuner_bound(
    spec: ControllerSpec, state: ControllerState, view: FleetView | None, now: float
) -> FleetView | None:
    """The view the autoscaler sees: with the tuner on, sequence slots run short only at what it could raise to.

    A binding ``max_num_seqs`` below that is the tuner's to raise (instantly, for free), so the
    autoscaler measures the running batch against it; otherwise both would answer the same shortage
    and the fleet would end with replicas that a larger budget makes unnecessary. What it could raise
    to is its upper bound, except while a storm is remembered (``budget_tuner.seq_ceiling``): then a
    binding budget is the capacity there is, and only replicas add more (in simulation, measuring
    against the bound instead left a standing queue behind the AIMD saw-tooth for most of the day).
    """
    if view is None or view.seq_budget_usage is None or spec.budget is None or state.tuner is None:
        return view
    ceiling = max(state.tuner.budgets.max_num_seqs, budget_tuner.seq_ceiling(spec.budget, state.tuner, now))
    share = state.tuner.budgets.max_num_seqs / ceiling
    return replace(view, seq_budget_usage=view.seq_budget_usage * share)


def _conditions(
    spec: ControllerSpec, obs: Observation, view: FleetView | None, scale: ScaleDecision | None
) -> tuple[Condition, ...]:
    ready = len(obs.ready_pods)
    answered = view.reporting if view is not None else 0
    missing = sorted(set(obs.ready_pods) - {s.pod for s in obs.samples})
    if is_degraded(answered, ready, spec.min_reporting_fraction):
        detail = "; ".join(f"{pod}: {obs.failures.get(pod, 'no sample')}" for pod in missing)
        degraded = Condition(
            "Degraded",
            "True",
            "MetricsUnavailable",
            f"{answered}/{ready} ready replicas answered their metrics scrape ({detail})",
        )
    else:
        degraded = Condition("Degraded", "False", "MetricsAvailable", f"{answered}/{ready} ready replicas answered")
    conditions = [degraded]
    if scale is not None:
        if scale.limited is not None:
            conditions.append(Condition("ScalingLimited", "True", scale.limited.value, scale.reason))
        else:
            conditions.append(Condition("ScalingLimited", "False", "DesiredWithinRange", scale.reason))
    return tuple(conditions)
