"""Status conditions and decision records from what the cluster shows (pure, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from operator_views import view
from paged_operator.policy.arbiter import Action, Verdict
from paged_operator.policy.autoscaler import ScaleDecision, Signal
from paged_operator.policy.controller import Plan
from paged_operator.status import builder as sb
from paged_platform.api import ModelDeploymentStatus
from paged_platform.engine_contract.budgets import Budgets

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def pod(*, ready: bool = True, phase: str = "Running", ip: str | None = "127.1.0.5", deleting: bool = False):
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_pod_readiness_needs_running_ready_an_ip_and_no_deletion() -> None:
    assert sb.pod_is_ready(pod())
    assert not sb.pod_is_ready(pod(ready=False))
    assert not sb.pod_is_ready(pod(phase="Pending"))
    assert not sb.pod_is_ready(pod(ip=None))
    assert not sb.pod_is_ready(pod(deleting=True))
    assert sb.pod_is_terminating(pod(deleting=True)) and sb.pod_is_terminating(pod(phase="Failed"))
    assert not sb.pod_is_terminating(pod(phase="Pending"))


@pytest.mark.parametrize(
    ("ready", "desired", "minimum", "status", "reason"),
    [
        (2, 2, 2, "True", "MinimumReplicasReady"),
        (2, 3, 2, "True", "MinimumReplicasReady"),
        (1, 2, 2, "False", "MinimumReplicasUnavailable"),
        (0, 1, 0, "False", "MinimumReplicasUnavailable"),
        (0, 0, 0, "True", "ScaledToZero"),
    ],
)
def test_ready_condition(ready: int, desired: int, minimum: int, status: str, reason: str) -> None:
    value = sb.ready_condition(ready, desired, minimum)
    assert (value.status, value.reason) == (status, reason)


def deployment(generation: int = 2, observed: int = 2, replicas: int = 2, updated: int = 2, available: int = 2):
    return {
        "metadata": {"generation": generation},
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": updated,
            "availableReplicas": available,
        },
    }


@pytest.mark.parametrize(
    ("dep", "desired", "status", "reason"),
    [
        (None, 1, "True", "CreatingDeployment"),
        (deployment(generation=3), 2, "True", "RollingOut"),
        (deployment(updated=1), 2, "True", "RollingOut"),
        (deployment(replicas=3, updated=3, available=3), 2, "True", "ScalingDown"),
        (deployment(available=1), 2, "True", "ScalingUp"),
        (deployment(), 2, "False", "Stable"),
    ],
)
def test_progressing_condition(dep: dict[str, Any] | None, desired: int, status: str, reason: str) -> None:
    value = sb.progressing_condition(dep, desired)
    assert (value.status, value.reason) == (status, reason)


def plan(*, replicas: int | None = None, budgets: Budgets | None = None, scale: ScaleDecision | None = None) -> Plan:
    action = Action.SCALE if replicas is not None else Action.TUNE if budgets is not None else Action.NONE
    return Plan(
        replicas=replicas,
        budgets=budgets,
        target_budgets=budgets,
        push_budgets_to=(),
        verdict=Verdict(action, "R5", "scaling: kv_cache_usage 0.9 > target 0.75 on 1 replicas"),
        scale=scale,
        tune=None,
        view=view(ready=1, kv=0.9, waiting=3.0),
        conditions=(),
    )


def test_scale_decision_records_from_to_reason_and_signals() -> None:
    scale = ScaleDecision(desired=2, current=1, reason="up", signals=(Signal("kv_cache_usage", 0.9, 0.75, 1.2),))
    decision = sb.scale_decision(plan(replicas=2, scale=scale), current=1, now=NOW)
    assert decision is not None
    assert (decision.kind, decision.from_.replicas, decision.to.replicas, decision.dry_run) == ("scale", 1, 2, False)
    assert decision.reason.startswith("scaling: kv_cache_usage")
    assert decision.signals["kvCacheUsage"] == 0.9 and decision.signals["waitingPerReplica"] == 3.0
    assert sb.scale_decision(plan(), current=1, now=NOW) is None


def test_dry_run_decisions_are_recorded_once() -> None:
    scale = ScaleDecision(desired=3, current=1, reason="would scale", dry_run=True)
    decision = sb.scale_decision(plan(scale=scale), current=1, now=NOW)
    assert decision is not None and decision.dry_run and decision.to.replicas == 3
    status = ModelDeploymentStatus()
    assert not sb.is_repeat(status, decision)
    status.record_decision(decision)
    assert sb.is_repeat(status, decision)


def test_budget_decision() -> None:
    decision = sb.budget_decision(plan(budgets=Budgets(48, 2048)), Budgets(32, 2048), NOW)
    assert decision is not None and decision.kind == "budget"
    assert (decision.from_.max_num_seqs, decision.to.max_num_seqs) == (32, 48)
    assert sb.budget_decision(plan(), Budgets(32, 2048), NOW) is None


def test_metrics_snapshot_is_clamped_into_the_schema() -> None:
    snap = sb.metrics_snapshot(view(ready=2, kv=1.02, waiting=1.5, preempt=None), NOW)
    assert snap.kv_cache_usage == 1.0 and snap.requests_waiting == 1.5 and snap.preemption_rate == 0.0
    assert snap.replicas == 2


def test_unschedulable_pods_are_those_the_scheduler_could_not_place_for_too_long() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def pod(name: str, age_s: int, phase: str = "Pending", scheduled: dict | None = None) -> dict:
        created = (now - timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z")
        conditions = [{"type": "PodScheduled", **scheduled}] if scheduled else []
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": phase, "conditions": conditions},
        }

    no_gpu = {
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    }
    pods = [
        pod("stuck", 300, scheduled=no_gpu),
        pod("young", 30, scheduled=no_gpu),  # the scheduler may still find room (or a node is being added)
        pod("pulling", 900, scheduled={"status": "True"}),  # placed: starting, however long it takes
        pod("serving", 900, phase="Running", scheduled={"status": "True"}),
    ]
    assert sb.unschedulable_pods(pods, now, 120) == {"stuck": no_gpu["message"]}
