"""Conflict-safe writes: the status and the engine Deployment's replica count, each with optimistic concurrency.

Two writers share one ModelDeployment: ``reconcile`` (spec changes) and the per-object control loop
(decisions). Each works from a copy of the object that may be seconds old, so neither may write what it
read back blindly:

* **Status**: every write is a *change* applied to a freshly read status, sent as a merge patch that
  carries the ``metadata.resourceVersion`` it was computed from. The API server refuses it (409) if the
  object changed in between; the object is then read again and the change re-applied. So a decision the
  other writer recorded is never overwritten by an older copy, and ``observedGeneration`` only moves
  forward (``advance_generation``).
* **Replicas**: a compare-and-swap on ``spec.replicas``. The apply carries the Deployment's
  resourceVersion; on a conflict the Deployment is read again, and the write is retried only if the
  count is still the one the new value was computed from (other fields, e.g. the Deployment
  controller's status, change often and are no reason to give up). A count someone else changed in
  between wins: the caller's decision was made on a stale count and is dropped (``None``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from paged_platform.api import ModelDeployment, ModelDeploymentStatus
from pydantic import ValidationError

from paged_operator.clients.kube import REPLICAS_FIELD_MANAGER, ApiError, KubeApi, model_deployment_path, object_path
from paged_operator.render import children

#: Attempts before a write gives up (each conflict means another writer made progress, so this is rarely reached).
MAX_ATTEMPTS = 5

StatusChange = Callable[[ModelDeploymentStatus, Mapping[str, Any]], None]
"""Mutates the freshly read status in place; gets the object it was read from (for its generation)."""


class WriteConflict(RuntimeError):
    """Another writer kept changing the object for ``MAX_ATTEMPTS`` tries."""


def status_time() -> datetime:
    """Now, as the status records it (conditions, decisions): UTC, whole seconds."""
    return datetime.now(UTC).replace(microsecond=0)


def read_status(body: Mapping[str, Any]) -> ModelDeploymentStatus:
    try:
        return ModelDeploymentStatus.model_validate(dict(body.get("status") or {}))
    except ValidationError:
        return ModelDeploymentStatus()  # written by an older operator: start over rather than fail


def advance_generation(status: ModelDeploymentStatus, generation: int | None) -> None:
    """Record ``generation`` as observed unless a newer one already is (two reconciles may finish out of order)."""
    if generation is not None and (status.observed_generation is None or generation > status.observed_generation):
        status.observed_generation = generation


async def update_status(
    kube: KubeApi, body: Mapping[str, Any], change: StatusChange, *, fresh: bool = False
) -> ModelDeploymentStatus:
    """Apply ``change`` to the status of the object ``body`` names, starting from ``body`` unless ``fresh``.

    Returns the status written. ``change`` may run more than once (once per conflict): it must only set
    fields, never post Events or count things.
    """
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    path = model_deployment_path(namespace, name)
    current: Mapping[str, Any] = await kube.get(path) if fresh else body
    for _ in range(MAX_ATTEMPTS):
        status = read_status(current)
        change(status, current)
        version = (current.get("metadata") or {}).get("resourceVersion")
        try:
            await kube.patch_status(namespace, name, status.to_wire(), resource_version=version)
            return status
        except ApiError as exc:
            if exc.code != 409:
                raise
        current = await kube.get(path)
    raise WriteConflict(f"status of {namespace}/{name} changed under {MAX_ATTEMPTS} attempts to write it")


async def set_replicas(
    kube: KubeApi,
    md: ModelDeployment,
    deployment: Mapping[str, Any],
    choose: Callable[[int | None], int | None],
    *,
    take_ownership: bool = False,
) -> tuple[int | None, Mapping[str, Any]]:
    """Set the Deployment's ``spec.replicas`` to ``choose(current)`` (None: leave it), current as last read.

    ``take_ownership``: write even when the count is already right, so that the operator's replica field
    manager owns the field (a new Deployment's defaulted 1, or a count someone else set to the same value):
    ownership is how the operator later tells its own writes from others'.

    Returns the count written (None when nothing was written or a concurrent writer changed the count
    first and ``choose`` declined on the new one) and the latest Deployment seen.
    """
    path = object_path("Deployment", md.metadata.namespace or "", children.deployment_name(md))
    for _ in range(MAX_ATTEMPTS):
        current = (deployment.get("spec") or {}).get("replicas")
        wanted = choose(current)
        if wanted is None or (wanted == current and not take_ownership):
            return None, deployment
        patch = children.replicas_patch(md, wanted)
        patch["metadata"]["resourceVersion"] = deployment["metadata"]["resourceVersion"]
        try:
            written = await kube.apply(patch, field_manager=REPLICAS_FIELD_MANAGER)
            return wanted, written
        except ApiError as exc:
            if exc.code != 409:
                raise
        deployment = await kube.get(path)
    raise WriteConflict(f"Deployment {path} changed under {MAX_ATTEMPTS} attempts to scale it")
