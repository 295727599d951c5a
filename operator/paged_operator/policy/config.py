"""From a ModelDeployment's spec to the policies' inputs: the one place where API fields meet policy knobs.

The API exposes what users reason about (targets, windows, steps, bounds); the knobs it does not
expose keep the policies' defaults, except those that must follow the decision interval: rates and
the panic average need at least two samples, and a budget change needs a few decisions to show.
"""

from __future__ import annotations

from paged_platform.api import ModelDeploymentSpec
from paged_platform.engine_contract.budgets import BudgetLimits, Budgets, limits_for_ceiling

from paged_operator.policy.arbiter import ArbiterSpec
from paged_operator.policy.autoscaler import AutoscalingPolicySpec
from paged_operator.policy.budget_tuner import BudgetSpec
from paged_operator.policy.controller import ControllerSpec
from paged_operator.policy.scale_to_zero import ZeroSpec

#: Windows that average samples span at least this many decision intervals.
SAMPLES_PER_WINDOW = 2
#: A budget change is given this many decision intervals to show its effect before the next one.
INTERVALS_PER_COOLDOWN = 4


def controller_spec(spec: ModelDeploymentSpec) -> ControllerSpec:
    """The policies configured by ``spec`` (None for a disabled autoscaler or a static budget)."""
    interval = float(spec.autoscaling.interval_seconds)
    window = max(30.0, SAMPLES_PER_WINDOW * interval)
    autoscaling = None
    zero = scales_to_zero(spec)
    if spec.autoscaling.enabled:
        targets, up, down = spec.autoscaling.targets, spec.autoscaling.scale_up, spec.autoscaling.scale_down
        autoscaling = AutoscalingPolicySpec(
            min_replicas=max(1, spec.replicas.min) if zero is not None else spec.replicas.min,
            max_replicas=spec.replicas.max,
            target_kv_usage=targets.kv_cache_usage,
            target_waiting_per_replica=targets.waiting_per_replica,
            target_preemption_rate=targets.preemption_rate,
            ttft_p95_slo_s=targets.ttft_p95_seconds,
            stabilization_window_up_s=up.stabilization_window_seconds,
            stabilization_window_down_s=down.stabilization_window_seconds,
            max_step_up=up.max_step,
            max_step_down=down.max_step,
            panic_window_s=window,
            dry_run=spec.autoscaling.dry_run,
        )
    budget = None
    adaptive = spec.scheduler_budget.adaptive
    if adaptive.enabled:
        budget = BudgetSpec(
            min_num_seqs=adaptive.max_num_seqs.min,
            max_num_seqs=adaptive.max_num_seqs.max,
            min_num_batched_tokens=adaptive.max_num_batched_tokens.min,
            max_num_batched_tokens=adaptive.max_num_batched_tokens.max,
            ttft_p95_slo_s=spec.autoscaling.targets.ttft_p95_seconds,
            cooldown_s=max(60.0, INTERVALS_PER_COOLDOWN * interval),
        )
    return ControllerSpec(
        autoscaling=autoscaling, budget=budget, arbiter=ArbiterSpec(), zero=zero, rate_window_s=window
    )


def scales_to_zero(spec: ModelDeploymentSpec) -> ZeroSpec | None:
    """Scale to zero needs ``replicas.min: 0``, the autoscaler, and a router to hold requests and report demand
    (without one, nothing would wake the fleet: it then never goes below one replica by idleness)."""
    if spec.replicas.min == 0 and spec.autoscaling.enabled and spec.router.enabled:
        return ZeroSpec(idle_s=float(spec.autoscaling.idle_seconds))
    return None


def starting_budgets(spec: ModelDeploymentSpec) -> Budgets:
    """The budgets pods start with before the tuner has changed anything: the spec's (unset ones by the engine
    contract's rule for the pods' device), moved into the tuner's bounds when it is on."""
    start = spec.resolved_budgets()
    tuner = controller_spec(spec).budget
    return tuner.clamp(start) if tuner is not None else start


def live_limits(spec: ModelDeploymentSpec) -> BudgetLimits:
    """The live limits the engines start with: every budget the spec starts with or the tuner may set is accepted
    by their admin API (the engine contract's rule, raised to the tuner's upper bounds)."""
    return limits_for_ceiling(starting_budgets(spec), spec.scheduler_budget.adaptive.ceiling())
