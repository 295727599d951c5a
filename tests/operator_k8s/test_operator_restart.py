"""An operator restarted mid-episode goes on from the memory the last one left in ``status.controllerMemory``.

The control loop runs in-process against the real API server (as the chart's ServiceAccount), on the
kwok pods of a real Deployment; the engines behind the pod IPs are a stand-in transport whose load the
test sets, and the clock is the test's, so windows of minutes pass in a few decisions. A "restart" is a
new ``ControlLoop`` with nothing in memory, reading the object afresh, as a restarted process (or a newly
elected leader) does.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import kopf
import pytest
from paged_operator import handlers
from paged_operator.clients.kube import KubeApi
from paged_operator.control_loop import ControlLoop
from paged_operator.render import children
from paged_operator.render.settings import RenderSettings
from paged_operator.shared import Options, Shared
from paged_operator.status import builder as status_builder
from paged_operator.status.writer import read_status

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator.operator_exposition import budgets_answer, exposition
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s
KEY = b"k" * 32
NAME = "restart"
DOWN_WINDOW_S = 60
SPEC: dict[str, Any] = {
    "replicas": {"min": 1, "max": 4},
    "autoscaling": {
        "intervalSeconds": 5,
        # Held at 3 through the storm (the tuner's to fix), down to 1 once idle.
        "targets": {"kvCacheUsage": 0.95, "preemptionRate": 5, "waitingPerReplica": 10},
        "scaleUp": {"stabilizationWindowSeconds": 0},
        "scaleDown": {"stabilizationWindowSeconds": DOWN_WINDOW_S},
    },
    "schedulerBudget": {
        "maxNumSeqs": 48,
        "maxNumBatchedTokens": 2048,
        "adaptive": {"enabled": True, "maxNumSeqs": {"min": 8, "max": 64}},
    },
}


@dataclass
class Engines:
    """What every engine behind the pod IPs answers: its load, and the budgets last pushed to it."""

    kv: float = 0.3
    waiting: int = 0
    preemption_rate: float = 0.0
    preemptions: float = 0.0
    max_num_seqs: int = 48
    running: int = 8

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(200, json={"ready": True})
        if request.url.path == "/metrics":
            text = exposition(
                kv=self.kv,
                running=self.running,
                waiting=self.waiting,
                preemptions=self.preemptions,
                max_num_seqs=self.max_num_seqs,
            )
            return httpx.Response(200, text=text)
        if request.url.path == "/admin/budgets" and request.method == "PUT":
            self.max_num_seqs = json.loads(request.content)["max_num_seqs"]
            return httpx.Response(200, json=budgets_answer(request.content))
        return httpx.Response(404)


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def kube(chart_access: ServiceAccountAccess) -> AsyncIterator[KubeApi]:
    creds = chart_access.credentials
    api = KubeApi.from_connection(
        kopf.ConnectionInfo(server=creds.server, ca_path=str(creds.ca_cert), token=creds.token)
    )
    yield api
    await api.aclose()


async def test_a_restarted_operator_keeps_its_windows_and_its_memory_of_overloads(
    kube_admin: KubeClient, kube_namespace: str, kube: KubeApi
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment(NAME, **{**SPEC, "replicas": {"min": 3, "max": 4}}))
    body = kube_admin.get(md_path(ns, NAME))
    await handlers.apply_children(kube, handlers.parse(body), body, KEY, RenderSettings())
    kube_admin.patch(md_path(ns, NAME), {"spec": {"replicas": {"min": 1, "max": 4}}})  # room to scale down to 1

    selector = children.selector_string(handlers.parse(body))

    def three_ready() -> bool:
        pods = kube_admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]
        return sum(1 for p in pods if status_builder.pod_is_ready(p)) == 3

    wait_for("3 ready kwok pods", three_ready, timeout_s=60)

    engines = Engines()
    clock = Clock(1_800_000_000.0)
    transport = httpx.AsyncClient(transport=httpx.MockTransport(engines.handle))

    def operator() -> ControlLoop:
        shared = Shared(options=Options(token_key=KEY), clock=clock)
        shared._kube, shared._http = kube, transport
        return ControlLoop(shared)

    async def tick(loop: ControlLoop, seconds: float = 5.0) -> dict[str, Any]:
        clock.now += seconds
        engines.preemptions += engines.preemption_rate * seconds
        fresh = kube_admin.get(md_path(ns, NAME))
        await loop.tick(handlers.parse(fresh), fresh)
        return kube_admin.get(md_path(ns, NAME))

    def replicas() -> int:
        return kube_admin.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")["spec"]["replicas"]

    first = operator()
    # A preemption storm at full KV: the tuner lowers max_num_seqs 48 → 36 and remembers the storm at 48.
    engines.kv, engines.preemption_rate, engines.running = 0.92, 2.0, 40
    for _ in range(3):
        obj = await tick(first)
    assert engines.max_num_seqs == 36 == _seqs(obj)
    # Then the load falls to what one replica carries: the down-window starts from the busy samples.
    engines.kv, engines.preemption_rate, engines.running = 0.15, 0.0, 4
    busy_until = clock.now
    for _ in range(4):
        obj = await tick(first)
    assert replicas() == 3 and read_status(obj).controller_memory  # memory is written with every decision

    # The operator restarts: a new loop, nothing in memory but what the status says.
    second = operator()
    while replicas() == 3:
        await tick(second)
        assert clock.now < busy_until + DOWN_WINDOW_S + 30, "never scaled down"
    # The window counted from the busy samples before the restart (without the memory, from the restart).
    assert busy_until + DOWN_WINDOW_S <= clock.now <= busy_until + DOWN_WINDOW_S + 5
    assert replicas() == 2

    # Requests queue behind a binding budget, KV roomy: the restarted tuner raises, but only to one step
    # below the storm's 48 (without the memory it jumps to where KV would reach its low-water mark, 54).
    engines.kv, engines.waiting, engines.running = 0.4, 6, 34
    for _ in range(8):
        obj = await tick(second, 15.0)
    assert engines.max_num_seqs == 40 == _seqs(obj)
    scaled = [(d.from_.replicas, d.to.replicas) for d in read_status(obj).decisions if d.kind == "scale"]
    assert scaled[0] == (3, 2) and all(a != b for a, b in itertools.pairwise(scaled))  # each recorded once
    await transport.aclose()


def _seqs(obj: dict[str, Any]) -> int | None:
    budget = read_status(obj).budget
    return budget.max_num_seqs if budget is not None else None
