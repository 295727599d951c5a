"""Optimistic concurrency of the operator's writes, against a small fake API server that checks resourceVersions
(the real one is in tests/operator_k8s/test_operator_conflicts.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from paged_operator.clients.kube import KubeApi
from paged_operator.status.writer import (
    WriteConflict,
    advance_generation,
    read_status,
    set_replicas,
    update_status,
)
from paged_platform.api import Decision, DecisionState, ModelDeployment, ModelDeploymentStatus

MD_PATH = "/apis/paged.dev/v1alpha1/namespaces/ns/modeldeployments/m"
DEP_PATH = "/apis/apps/v1/namespaces/ns/deployments/m"


class FakeServer:
    """Two objects with resourceVersions; a write naming an old version is refused with 409, like the real one."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {
            MD_PATH: {"metadata": {"name": "m", "namespace": "ns", "resourceVersion": "1", "generation": 2}},
            DEP_PATH: {"metadata": {"name": "m", "namespace": "ns", "resourceVersion": "1"}, "spec": {"replicas": 2}},
        }
        self.writes = 0
        self.before_write: Callable[[], None] | None = None  # a concurrent writer, run before each write lands

    def bump(self, path: str) -> None:
        meta = self.objects[path]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removesuffix("/status")
        if request.method == "GET":
            return httpx.Response(200, json=self.objects[path])
        body = json.loads(request.content)
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        obj = self.objects[path]
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            return httpx.Response(409, json={"reason": "Conflict", "message": "the object has been modified"})
        self.writes += 1
        if "status" in body:
            obj["status"] = body["status"]
        else:
            obj["spec"]["replicas"] = body["spec"]["replicas"]
        self.bump(path)
        return httpx.Response(200, json=obj)


def kube(server: FakeServer) -> KubeApi:
    return KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(server.handler)))


def md() -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "ns"}, "spec": {}})


def decision(replicas: int) -> Decision:
    return Decision.model_validate(
        {
            "time": "2026-01-01T00:00:00Z",
            "kind": "scale",
            "from": DecisionState(replicas=replicas - 1).model_dump(by_alias=True, exclude_none=True),
            "to": DecisionState(replicas=replicas).model_dump(by_alias=True, exclude_none=True),
            "reason": "test",
        }
    )


def test_observed_generation_only_moves_forward() -> None:
    status = ModelDeploymentStatus(observed_generation=5)
    advance_generation(status, 4)
    assert status.observed_generation == 5
    advance_generation(status, 6)
    assert status.observed_generation == 6
    advance_generation(ModelDeploymentStatus(), None)


async def test_a_stale_status_write_is_redone_on_the_fresh_status() -> None:
    server = FakeServer()
    stale = json.loads(json.dumps(server.objects[MD_PATH]))  # the writer's copy, about to go stale

    def other_writer() -> None:  # reconcile records generation 2 meanwhile
        server.objects[MD_PATH]["status"] = {"observedGeneration": 2, "desiredReplicas": 3}
        server.bump(MD_PATH)

    server.before_write = other_writer
    runs = []

    def record(status: ModelDeploymentStatus, _: dict) -> None:
        runs.append(status.observed_generation)
        status.record_decision(decision(3))

    api = kube(server)
    written = await update_status(api, stale, record)
    await api.aclose()
    assert runs == [None, 2]  # computed again from what the other writer left
    final = read_status(server.objects[MD_PATH])
    assert final.observed_generation == 2 and final.desired_replicas == 3 and len(final.decisions) == 1
    assert written.observed_generation == 2


async def test_a_writer_that_keeps_losing_gives_up_with_a_clear_error() -> None:
    server = FakeServer()
    api = kube(server)

    def always_stale(status: ModelDeploymentStatus, _: dict) -> None:
        server.bump(MD_PATH)  # someone else writes between every read and write

    with pytest.raises(WriteConflict, match="status of ns/m changed under 5 attempts"):
        await update_status(api, json.loads(json.dumps(server.objects[MD_PATH])), always_stale)
    await api.aclose()


async def test_replicas_are_swapped_only_from_the_count_the_decision_saw() -> None:
    server = FakeServer()
    api = kube(server)
    deployment = json.loads(json.dumps(server.objects[DEP_PATH]))

    # The Deployment controller updates its status meanwhile (new resourceVersion, same count): retried.
    server.before_write = lambda: server.bump(DEP_PATH)
    written, latest = await set_replicas(api, md(), deployment, lambda live: 4 if live == 2 else None)
    assert written == 4 and server.objects[DEP_PATH]["spec"]["replicas"] == 4

    # Reconcile moved the count into new bounds meanwhile: the decision made for 4 is dropped.
    def rebound() -> None:
        server.objects[DEP_PATH]["spec"]["replicas"] = 6
        server.bump(DEP_PATH)

    server.before_write = rebound
    written, latest = await set_replicas(api, md(), latest, lambda live: 5 if live == 4 else None)
    assert written is None and latest["spec"]["replicas"] == 6 and server.objects[DEP_PATH]["spec"]["replicas"] == 6

    # Nothing to change: no write at all, unless the operator must own the field first.
    writes = server.writes
    assert (await set_replicas(api, md(), latest, lambda live: live))[0] is None and server.writes == writes
    assert (await set_replicas(api, md(), latest, lambda live: live, take_ownership=True))[0] == 6
    assert server.writes == writes + 1
    await api.aclose()
