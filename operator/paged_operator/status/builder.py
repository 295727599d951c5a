"""Pure pieces of ``ModelDeployment.status``: conditions from what the cluster shows, and records of decisions.

The handlers gather the facts (the Deployment, its pods, the last plan) and these functions turn them into
status fields, so every condition's rule is unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from paged_platform.api import (
    AdapterStatus,
    BudgetState,
    Decision,
    DecisionState,
    MetricsSnapshot,
    ModelDeployment,
    ModelDeploymentStatus,
    describe_source,
)
from paged_platform.engine_contract.budgets import Budgets
from pydantic.alias_generators import to_camel

from paged_operator.policy.controller import Plan
from paged_operator.policy.fleet_view import FleetView

ConditionStatus = Literal["True", "False", "Unknown"]


def adapter_statuses(md: ModelDeployment) -> list[AdapterStatus]:
    """The adapters every replica is started with (``spec.adapters``), each source in one line."""
    return [AdapterStatus(name=a.name, source=describe_source(a.source.given())) for a in md.spec.adapters]


@dataclass(frozen=True)
class ConditionValue:
    status: ConditionStatus
    reason: str
    message: str


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """Kubernetes' view: running, Ready condition true, an IP, not being deleted."""
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return (
        not (pod.get("metadata") or {}).get("deletionTimestamp")
        and status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    )


def pod_is_terminating(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or status.get("phase") in ("Succeeded", "Failed")


def unschedulable_pods(pods: Iterable[Mapping[str, Any]], now: datetime, timeout_s: float) -> dict[str, str]:
    """Pods the scheduler has not placed ``timeout_s`` after their creation: name → the scheduler's message.

    That is a pod Pending with ``PodScheduled=False`` (reason ``Unschedulable``): no node has the resources
    (GPUs, memory) or matches its selector and tolerations. A pod that was placed and is pulling its image
    or loading the model is starting, not stuck, however long it takes.
    """
    stuck: dict[str, str] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if status.get("phase") != "Pending" or meta.get("deletionTimestamp"):
            continue
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if scheduled is None or scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
            continue
        created = meta.get("creationTimestamp")
        if created and (now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds() < timeout_s:
            continue
        stuck[meta.get("name", "?")] = scheduled.get("message") or "unschedulable"
    return stuck


def ready_condition(ready: int, desired: int, min_replicas: int) -> ConditionValue:
    """Ready when at least ``replicas.min`` replicas serve (one, when min is 0 but replicas are wanted)."""
    need = max(min_replicas, 1 if desired > 0 else 0)
    if need == 0:
        return ConditionValue("True", "ScaledToZero", "no replicas wanted (replicas.min is 0)")
    if ready >= need:
        return ConditionValue("True", "MinimumReplicasReady", f"{ready} replicas ready ({desired} desired)")
    return ConditionValue(
        "False", "MinimumReplicasUnavailable", f"{ready} replicas ready, at least {need} needed ({desired} desired)"
    )


def progressing_condition(deployment: Mapping[str, Any] | None, desired: int) -> ConditionValue:
    """Progressing while the Deployment rolls out a new template or moves towards the desired count."""
    if deployment is None:
        return ConditionValue("True", "CreatingDeployment", "the engine Deployment does not exist yet")
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return ConditionValue("True", "RollingOut", "the Deployment controller has not seen the latest template yet")
    updated, total = status.get("updatedReplicas", 0), status.get("replicas", 0)
    available = status.get("availableReplicas", 0)
    if updated < desired:
        return ConditionValue("True", "RollingOut", f"{updated} of {desired} replicas run the latest template")
    if total > desired:
        return ConditionValue("True", "ScalingDown", f"{total} replicas exist, {desired} desired")
    if available < desired:
        return ConditionValue("True", "ScalingUp", f"{available} of {desired} replicas available")
    return ConditionValue("False", "Stable", f"{desired} replicas up to date and available")


def metrics_snapshot(view: FleetView, now: datetime) -> MetricsSnapshot:
    return MetricsSnapshot(
        time=now,
        replicas=view.reporting,
        kv_cache_usage=min(1.0, max(0.0, view.kv_usage_mean)),
        requests_waiting=max(0.0, view.waiting_per_replica),
        requests_running=max(0.0, view.running_per_replica),
        preemption_rate=max(0.0, view.preemption_rate_per_replica or 0.0),
        prefix_cache_hit_rate=view.prefix_hit_rate,
        ttft_p95_seconds=view.ttft_p95_s,
    )


def budget_state(budgets: Budgets) -> BudgetState:
    return BudgetState(max_num_seqs=budgets.max_num_seqs, max_num_batched_tokens=budgets.max_num_batched_tokens)


def _signals(plan: Plan) -> dict[str, float]:
    out: dict[str, float] = {}
    if plan.scale is not None:
        out.update({to_camel(s.name): round(s.value, 4) for s in plan.scale.signals})
    if plan.view is not None:
        out.setdefault("kvCacheUsage", round(plan.view.kv_usage_mean, 4))
        out["waitingPerReplica"] = round(plan.view.waiting_per_replica, 4)
        out["readyReplicas"] = float(plan.view.ready)
    return out


def _reason(text: str) -> str:
    return text if len(text) <= 1024 else text[:1021] + "..."


def scale_decision(plan: Plan, current: int, now: datetime) -> Decision | None:
    """The record of a replica change (or of a dry-run one); None when the plan changes no replica count."""
    scale = plan.scale
    if plan.replicas is not None:
        return Decision(
            time=now,
            kind="scale",
            **{"from": DecisionState(replicas=current)},
            to=DecisionState(replicas=plan.replicas),
            reason=_reason(plan.verdict.reason),
            signals=_signals(plan),
        )
    if scale is not None and scale.dry_run and scale.desired != current:
        return Decision(
            time=now,
            kind="scale",
            **{"from": DecisionState(replicas=current)},
            to=DecisionState(replicas=scale.desired),
            reason=_reason(scale.reason),
            signals=_signals(plan),
            dry_run=True,
        )
    return None


def budget_decision(plan: Plan, current: Budgets, now: datetime) -> Decision | None:
    """The record of a budget change; None when the plan changes no budget."""
    if plan.budgets is None:
        return None
    return Decision(
        time=now,
        kind="budget",
        **{
            "from": DecisionState(
                max_num_seqs=current.max_num_seqs, max_num_batched_tokens=current.max_num_batched_tokens
            )
        },
        to=DecisionState(
            max_num_seqs=plan.budgets.max_num_seqs, max_num_batched_tokens=plan.budgets.max_num_batched_tokens
        ),
        reason=_reason(plan.verdict.reason),
        signals=_signals(plan),
    )


def is_repeat(status: ModelDeploymentStatus, decision: Decision) -> bool:
    """A dry-run decision identical to the last one of its kind is not recorded again (no status churn)."""
    last = status.last_decision(decision.kind)
    return (
        decision.dry_run
        and last is not None
        and last.dry_run
        and (last.from_, last.to) == (decision.from_, decision.to)
    )


def external_scaler(writer: str, floor: int) -> ConditionValue:
    """``ScalingLimited`` while autoscaling is on and ``replicas.min`` came through the scale subresource."""
    return ConditionValue(
        "True",
        "ExternalScaler",
        f"replicas.min was set to {floor} through the scale subresource by {writer} (kubectl scale, an HPA or KEDA): "
        "with autoscaling enabled the operator's autoscaler sets the count and replicas.min is only its floor, so a "
        "scaler reading it as the current count acts on a wrong number; to hand the count to an external scaler, "
        "set autoscaling.enabled: false",
    )


def set_condition(
    status: ModelDeploymentStatus, type_: str, value: ConditionValue, now: datetime, generation: int | None
) -> None:
    """Set one condition to ``value``, claiming ``generation`` as observed."""
    status.set_condition(type_, value.status, value.reason, value.message, now=now, observed_generation=generation)


def budget_push_condition(failed: Mapping[str, str]) -> ConditionValue | None:
    """``Degraded`` while a budget push missed serving engines (pod → why); None when every push landed. The
    pods that missed it keep their budget, and the next decision pushes to them again."""
    if not failed:
        return None
    detail = "; ".join(f"{pod}: {why}" for pod, why in sorted(failed.items()))
    return ConditionValue("True", "BudgetPushFailed", f"{len(failed)} engines missed the budget push ({detail})")
