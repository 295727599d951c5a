"""The engine Deployment's replica count: who set it last, and the count the operator keeps.

Pure (objects in, answers out). Invariants: with autoscaling on the operator is the count's only writer and sets
a foreign count back; with it off the count is ``replicas.min`` until an external scaler (an HPA or KEDA on the
Deployment, ``kubectl scale deployment``) sets it, and from then on it is theirs. Ownership is read from
``managedFields``: the operator writes the count under its own field manager (``REPLICAS_FIELD_MANAGER``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paged_platform.api import ModelDeployment

from paged_operator.clients.kube import REPLICAS_FIELD_MANAGER
from paged_operator.status.writer import read_status


def desired_replicas(md: ModelDeployment, live: int | None, *, owned: bool, recorded: int | None) -> int:
    """The count the operator keeps, moved into the (possibly new) bounds.

    ``live`` is the Deployment's count, ``owned`` whether the operator wrote it last (``owns_replicas``),
    ``recorded`` the status' ``desiredReplicas`` (None before the first reconcile). The live count when the
    operator owns it: it is the autoscaler's latest write, which a status read seconds ago may not show
    yet. Otherwise (someone else scaled the Deployment, or it was just created and defaulted to 1) the
    recorded count, or ``replicas.min`` for a new object or with autoscaling off (a fixed count).
    """
    bounds = md.spec.replicas
    base = live if owned else recorded
    if not md.spec.autoscaling.enabled or base is None:
        return bounds.min
    return min(bounds.max, max(bounds.min, base))


def recorded_count(body: Mapping[str, Any]) -> int | None:
    """The status' ``desiredReplicas``; None before the first reconcile wrote a status."""
    status = read_status(body)
    return status.desired_replicas if status.observed_generation is not None else None


def replicas_owner(deployment: Mapping[str, Any]) -> str | None:
    """The field manager that set ``spec.replicas`` of this Deployment last (None: nobody, it was defaulted)."""
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
            return entry.get("manager")
    return None


def scale_subresource_writer(body: Mapping[str, Any]) -> str | None:
    """Who set ``spec.replicas.min`` of this ModelDeployment through its ``scale`` subresource, if that write still
    stands (``kubectl scale``, an HPA or KEDA targeting the ModelDeployment); None when a plain spec write set it.

    The scale subresource is the fleet's fixed count: ``min``, which is the count while autoscaling is off. With
    autoscaling on, ``min`` is only the autoscaler's floor, so a scaler reading it back as the current count (an
    HPA does) acts on a wrong number: the control loop reports that (``ScalingLimited=True/ExternalScaler``).
    """
    for entry in (body.get("metadata") or {}).get("managedFields") or []:
        replicas = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:replicas") or {}
        if entry.get("subresource") == "scale" and "f:min" in replicas:
            return str(entry.get("manager") or "an unnamed client")
    return None


def owns_replicas(deployment: Mapping[str, Any]) -> bool:
    """Whether the operator's replica field manager has set ``spec.replicas`` of this Deployment last."""
    return replicas_owner(deployment) == REPLICAS_FIELD_MANAGER


def scaled_externally(md: ModelDeployment, deployment: Mapping[str, Any]) -> bool:
    """Autoscaling is off and someone else (an HPA or KEDA on the engine Deployment, ``kubectl scale
    deployment``) has set the count: it is theirs, and the operator no longer writes it.

    With autoscaling on, the operator is the count's only writer and sets a foreign count back.
    """
    owner = replicas_owner(deployment)
    return not md.spec.autoscaling.enabled and owner not in (None, REPLICAS_FIELD_MANAGER)
