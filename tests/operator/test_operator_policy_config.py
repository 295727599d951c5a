"""ModelDeployment spec → policy inputs."""

from __future__ import annotations

from paged_operator.policy.config import controller_spec, starting_budgets
from paged_operator.policy.controller import initial_state
from paged_platform.api import ModelDeploymentSpec
from paged_platform.engine_contract.budgets import Budgets


def test_defaults_map_to_an_autoscaler_without_tuner() -> None:
    spec = ModelDeploymentSpec()
    c = controller_spec(spec)
    assert c.budget is None and c.autoscaling is not None
    a = c.autoscaling
    targets = spec.autoscaling.targets
    assert (a.min_replicas, a.max_replicas) == (spec.replicas.min, spec.replicas.max)
    assert (a.target_kv_usage, a.target_waiting_per_replica, a.target_preemption_rate) == (
        targets.kv_cache_usage,
        targets.waiting_per_replica,
        targets.preemption_rate,
    )
    assert a.stabilization_window_up_s == spec.autoscaling.scale_up.stabilization_window_seconds
    assert a.max_step_down == spec.autoscaling.scale_down.max_step
    assert c.rate_window_s == 30 and a.panic_window_s == 30  # two 15 s intervals
    assert starting_budgets(spec) == Budgets(128, 512)  # unset: the engine's rule for a CPU server


def test_full_spec_with_adaptive_budget() -> None:
    spec = ModelDeploymentSpec.model_validate(
        {
            "replicas": {"min": 2, "max": 9},
            "autoscaling": {
                "dryRun": True,
                "intervalSeconds": 60,
                "targets": {"kvCacheUsage": 0.8, "ttftP95Seconds": 1.5},
                "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 3},
            },
            "schedulerBudget": {
                "maxNumSeqs": 48,
                "maxNumBatchedTokens": 4096,
                "adaptive": {
                    "enabled": True,
                    "maxNumSeqs": {"min": 16, "max": 96},
                    "maxNumBatchedTokens": {"min": 1024, "max": 8192},
                },
            },
        }
    )
    c = controller_spec(spec)
    assert c.autoscaling is not None and c.budget is not None
    assert c.autoscaling.dry_run and c.autoscaling.ttft_p95_slo_s == 1.5 and c.autoscaling.max_step_up == 3
    assert c.rate_window_s == 120 and c.autoscaling.panic_window_s == 120
    b = c.budget
    assert (b.min_num_seqs, b.max_num_seqs, b.min_num_batched_tokens, b.max_num_batched_tokens) == (16, 96, 1024, 8192)
    assert b.ttft_p95_slo_s == 1.5 and b.cooldown_s == 240
    state = initial_state(c, starting_budgets(spec))
    assert state.tuner is not None and state.tuner.budgets == Budgets(48, 4096)


def test_autoscaling_disabled() -> None:
    assert controller_spec(ModelDeploymentSpec.model_validate({"autoscaling": {"enabled": False}})).autoscaling is None


def test_scale_to_zero_is_accepted() -> None:
    c = controller_spec(ModelDeploymentSpec.model_validate({"replicas": {"min": 0, "max": 3}}))
    assert c.autoscaling is not None and c.autoscaling.min_replicas == 0
    assert c.zero is None  # no router to hold requests and wake it: the autoscaler may reach 0 but nothing wakes it


def test_scale_to_zero_with_a_router_is_the_idle_policys() -> None:
    spec = {"replicas": {"min": 0, "max": 3}, "router": {"enabled": True}, "autoscaling": {"idleSeconds": 120}}
    c = controller_spec(ModelDeploymentSpec.model_validate(spec))
    assert c.zero is not None and c.zero.idle_s == 120
    assert c.autoscaling is not None and c.autoscaling.min_replicas == 1  # zero only by idleness
    with_floor = {**spec, "replicas": {"min": 1, "max": 3}}
    assert controller_spec(ModelDeploymentSpec.model_validate(with_floor)).zero is None
