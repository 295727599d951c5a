"""`ModelDeployment.status`: what the operator observed and decided. The operator is its only writer.

The helpers here are pure (the caller passes the time) so the operator's reconcile loop stays testable.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from paged_platform.api.base import ApiModel

MAX_DECISIONS = 20
"""How many scaling and budget decisions `status.decisions` keeps (oldest dropped first)."""
CONTROLLER_MEMORY_MAX_CHARS = 32768
"""Longest `status.controllerMemory` the operator writes."""


class ConditionType(StrEnum):
    READY = "Ready"
    """At least `replicas.min` replicas are ready (at least one when min is 0 and traffic exists)."""
    PROGRESSING = "Progressing"
    """A rollout or a scale change is under way."""
    DEGRADED = "Degraded"
    """Replicas are failing (crash loops, unschedulable, engine not healthy)."""
    MODEL_READY = "ModelReady"
    """The model is on the pods' disk: downloaded by the init container, or read from a volume or image. False
    says why a download fails (`ModelGated`, `ModelNotFound`, `DiskFull`, ...) or that it is under way."""
    SCALING_LIMITED = "ScalingLimited"
    """The autoscaler wants a count it cannot have; the reason says which limit."""


class ScalingLimitedReason(StrEnum):
    AT_MAX = "AtMaxReplicas"
    AT_MIN = "AtMinReplicas"
    INSUFFICIENT_RESOURCES = "InsufficientResources"


CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(ApiModel):
    """A standard Kubernetes condition (same shape as `metav1.Condition`)."""

    type: str = Field(max_length=316, pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024, pattern=CONDITION_REASON_PATTERN)
    """CamelCase, machine-readable cause of the last transition."""
    message: str = Field("", max_length=32768)
    last_transition_time: datetime
    """When `status` last changed (not when the condition was last written)."""
    observed_generation: int | None = Field(None, ge=0)


class BudgetState(ApiModel):
    """Scheduler budgets in force on the replicas."""

    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)


class MetricsSnapshot(ApiModel):
    """Per-replica averages the operator last read from the replicas' `/metrics`."""

    time: datetime
    replicas: int = Field(ge=0)
    """How many replicas were scraped."""
    kv_cache_usage: float = Field(ge=0, le=1)
    requests_waiting: float = Field(ge=0)
    requests_running: float = Field(ge=0)
    preemption_rate: float = Field(ge=0)
    """Preemptions per second."""
    prefix_cache_hit_rate: float | None = Field(None, ge=0, le=1)
    ttft_p95_seconds: float | None = Field(None, ge=0)


class DecisionState(ApiModel):
    """One side of a decision: a replica count (scale) or budgets (budget)."""

    replicas: int | None = Field(None, ge=0)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)

    def describe(self) -> str:
        parts = []
        if self.replicas is not None:
            parts.append(f"replicas={self.replicas}")
        if self.max_num_seqs is not None:
            parts.append(f"maxNumSeqs={self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"maxNumBatchedTokens={self.max_num_batched_tokens}")
        return ",".join(parts) or "-"


class Decision(ApiModel):
    """A scaling or budget decision with the signals that drove it, or a child put back after drift."""

    time: datetime
    kind: Literal["scale", "budget", "repair"]
    from_: DecisionState = Field(alias="from")
    to: DecisionState
    reason: str = Field(max_length=1024)
    """Human-readable: which signal crossed which target, or which limit held the change back."""
    signals: dict[str, float] = Field(default_factory=dict)
    """The observed values, by name (e.g. `kvCacheUsage`), at decision time."""
    dry_run: bool = False
    """Decided but not applied (`autoscaling.dryRun`)."""


class AdapterStatus(ApiModel):
    """A LoRA adapter the replicas serve."""

    name: str = Field(max_length=128)
    source: str = Field(max_length=2048)


class ModelDeploymentStatus(ApiModel):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(None, ge=0)
    """The `metadata.generation` this status describes."""
    replicas: int = Field(0, ge=0)
    """Engine pods that exist (the `scale` subresource's status replicas)."""
    ready_replicas: int = Field(0, ge=0)
    desired_replicas: int = Field(0, ge=0)
    """The count the operator has set on the child Deployment."""
    selector: str | None = None
    """Label selector of the engine pods, in string form (the `scale` subresource's selector)."""
    endpoint: str | None = None
    """In-cluster base URL of the OpenAI-compatible API."""
    model: str | None = Field(None, max_length=2048)
    """The model source in one line (`huggingFace org/name@main`, `s3://bucket/prefix/`, ...)."""
    adapters: list[AdapterStatus] = Field(default_factory=list, max_length=16)
    """The LoRA adapters every replica is started with, each with its source in one line."""
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    budget: BudgetState | None = None
    metrics: MetricsSnapshot | None = None
    decisions: list[Decision] = Field(default_factory=list, max_length=MAX_DECISIONS)
    """The last decisions, oldest first."""
    controller_memory: str | None = Field(None, max_length=CONTROLLER_MEMORY_MAX_CHARS)
    """The operator's memory of its own decisions (the autoscaler's windows, the budget tuner's known overloads),
    so that a restarted or newly elected operator goes on where the last one stopped. Versioned text private
    to the operator: not an interface, and safe to delete (the operator then starts afresh)."""

    def condition(self, type_: ConditionType | str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def set_condition(
        self,
        type_: ConditionType | str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str,
        *,
        now: datetime,
        observed_generation: int | None = None,
    ) -> bool:
        """Upsert a condition; `lastTransitionTime` moves only when `status` changes. True if anything changed."""
        current = self.condition(type_)
        if current is None:
            self.conditions.append(
                Condition(
                    type=str(type_),
                    status=status,
                    reason=reason,
                    message=message,
                    last_transition_time=now,
                    observed_generation=observed_generation,
                )
            )
            return True
        changed = (current.status, current.reason, current.message, current.observed_generation) != (
            status,
            reason,
            message,
            observed_generation,
        )
        if current.status != status:
            current.last_transition_time = now
        current.status, current.reason, current.message = status, reason, message
        current.observed_generation = observed_generation
        return changed

    def record_decision(self, decision: Decision) -> None:
        """Append a decision, keeping only the newest `MAX_DECISIONS`."""
        self.decisions = [*self.decisions, decision][-MAX_DECISIONS:]

    def last_decision(self, kind: Literal["scale", "budget"]) -> Decision | None:
        return next((d for d in reversed(self.decisions) if d.kind == kind), None)
