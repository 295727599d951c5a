"""The operator's two writers racing on the real API server, as the chart's ServiceAccount.

``reconcile`` (a spec edit) and the control loop (a scaling decision) are driven directly, with the stale
copies kopf may hand them, so the interleaving is the test's, not the scheduler's: a scaling decision made
seconds before a spec edit is not undone, the decisions it recorded are not dropped, and
``observedGeneration`` never goes backwards.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from paged_operator import handlers
from paged_operator.clients.kube import KubeApi
from paged_operator.render.settings import RenderSettings
from paged_operator.status.writer import read_status, set_replicas, update_status
from paged_platform.api import Decision, DecisionState, ModelDeploymentStatus

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s
KEY = b"k" * 32  # the admin tokens' key


@pytest.fixture
async def kube(chart_access: ServiceAccountAccess) -> AsyncIterator[KubeApi]:
    creds = chart_access.credentials
    api = KubeApi.from_connection(
        kopf.ConnectionInfo(server=creds.server, ca_path=str(creds.ca_cert), token=creds.token)
    )
    yield api
    await api.aclose()


def deployment_path(ns: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"


def scale_record(before: int, after: int) -> Decision:
    return Decision(
        time=datetime.now(UTC).replace(microsecond=0),
        kind="scale",
        **{"from": DecisionState(replicas=before)},
        to=DecisionState(replicas=after),
        reason=f"test decision {before} -> {after}",
    )


async def decide_and_scale(kube: KubeApi, body: dict[str, Any], to: int) -> int | None:
    """What the control loop does for one scaling decision, from its own (possibly stale) copy of the object."""
    md = handlers.parse(body)
    deployment = await kube.get(deployment_path(md.metadata.namespace or "", md.metadata.name))
    seen = deployment["spec"]["replicas"]
    written, _ = await set_replicas(kube, md, deployment, lambda live: to if live == seen else None)
    if written is None:
        return None

    def record(status: ModelDeploymentStatus, _: Any) -> None:
        status.record_decision(scale_record(seen, to))
        status.desired_replicas = to
        now = datetime.now(UTC)
        status.set_condition("Ready", "False", "Test", "loop", now=now, observed_generation=status.observed_generation)

    await update_status(kube, body, record)
    return written


async def test_a_spec_edit_racing_a_scaling_decision_keeps_both(
    kube_admin: KubeClient, kube_namespace: str, kube: KubeApi
) -> None:
    ns, name = kube_namespace, "race"
    kube_admin.create(md_path(ns), model_deployment(name, replicas={"min": 1, "max": 6}))
    first = kube_admin.get(md_path(ns, name))
    await handlers.apply_children(kube, handlers.parse(first), first, KEY, RenderSettings())
    assert kube_admin.get(deployment_path(ns, name))["spec"]["replicas"] == 1
    reconciled = kube_admin.get(md_path(ns, name))  # status: generation 1 observed, 1 replica desired

    # A spec edit; before reconcile gets to it, the loop scales 1 → 3 from its older copy (a 409, a re-read).
    kube_admin.patch(md_path(ns, name), {"spec": {"engine": {"extraArgs": ["--seed", "1"]}}})
    edited = kube_admin.get(md_path(ns, name))  # what kopf hands reconcile: the new spec, 1 replica desired
    assert await decide_and_scale(kube, reconciled, 3) == 3
    assert edited["status"]["desiredReplicas"] == 1
    await handlers.apply_children(kube, handlers.parse(edited), edited, KEY, RenderSettings())

    assert kube_admin.get(deployment_path(ns, name))["spec"]["replicas"] == 3  # the decision is not undone
    status = read_status(kube_admin.get(md_path(ns, name)))
    assert status.observed_generation == edited["metadata"]["generation"] == 2
    assert [d.to.replicas for d in status.decisions] == [3]  # the loop's record survived reconcile's write
    assert status.desired_replicas == 3

    # The loop writes again from its old copy (generation 1 observed there): the generation stays at 2.
    assert await decide_and_scale(kube, reconciled, 4) == 4
    status = read_status(kube_admin.get(md_path(ns, name)))
    assert status.observed_generation == 2 and [d.to.replicas for d in status.decisions] == [3, 4]
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.observed_generation == 2

    # Lowered bounds: reconcile moves the live count into them, from the live count, not from the status.
    kube_admin.patch(md_path(ns, name), {"spec": {"replicas": {"max": 2}}})
    lowered = kube_admin.get(md_path(ns, name))
    await handlers.apply_children(kube, handlers.parse(lowered), lowered, KEY, RenderSettings())
    assert kube_admin.get(deployment_path(ns, name))["spec"]["replicas"] == 2


async def test_concurrent_edits_and_decisions_converge(
    kube_admin: KubeClient, kube_namespace: str, kube: KubeApi
) -> None:
    """Reconciles and decisions really concurrent: every decision either lands whole or is dropped whole."""
    ns, name = kube_namespace, "storm"
    kube_admin.create(md_path(ns), model_deployment(name, replicas={"min": 1, "max": 8}))
    body = kube_admin.get(md_path(ns, name))
    await handlers.apply_children(kube, handlers.parse(body), body, KEY, RenderSettings())
    landed = []
    for round_ in range(6):
        kube_admin.patch(md_path(ns, name), {"spec": {"engine": {"extraArgs": ["--seed", str(round_)]}}})
        edited = kube_admin.get(md_path(ns, name))
        stale = copy.deepcopy(body)  # the loop's copy from before the edit
        _, written = await asyncio.gather(
            handlers.apply_children(kube, handlers.parse(edited), edited, KEY, RenderSettings()),
            decide_and_scale(kube, stale, 2 + round_),
        )
        if written is not None:
            landed.append(written)
        body = kube_admin.get(md_path(ns, name))
    final = kube_admin.get(md_path(ns, name))
    status = read_status(final)
    assert status.observed_generation == final["metadata"]["generation"] == 7
    assert landed == [2, 3, 4, 5, 6, 7]  # within the bounds, reconcile never has to move the count
    assert [d.to.replicas for d in status.decisions] == landed  # none lost to a concurrent status write
    assert kube_admin.get(deployment_path(ns, name))["spec"]["replicas"] == 7
