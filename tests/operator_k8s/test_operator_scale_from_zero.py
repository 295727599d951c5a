"""Scale from zero end to end on the test bed: the operator (the chart's RBAC), a real ``paged-router`` at its pod's
IP, and stand-in engines (``tests/router/fake_replica.py``) for the engine pods.

The test bed's pods have loopback IPs, which the API server refuses in EndpointSlices, so here the router is given
its replica's address (``--endpoint``) instead of discovering it (discovery from EndpointSlices is
``tests/router/test_discovery_k8s.py``'s): while no engine pod runs, nothing answers there and the router holds
requests, as it does while discovery finds no ready endpoint. Each engine pod gets one stand-in at its pod IP
(the operator probes and scrapes it) and one at the router's address.

A ModelDeployment with ``replicas.min: 0`` and a router starts at zero; a request to the router is held while the
operator, seeing it in the router's queue, scales 0 → 1; once the engine is ready the held request is served
(its cold start reported by the router); after ``idleSeconds`` without requests the fleet goes back to zero.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess, free_port
from tests.operator_k8s.helpers import condition, md_path, model_deployment
from tests.operator_k8s.pod_processes import PodProcesses
from tests.router.conftest import FAKE, FAKE_MODEL

pytestmark = [pytest.mark.k8s, pytest.mark.slow]
NAME = "sleepy"
IDLE_S = 30


def router_metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


@pytest.fixture
def pods() -> Iterator[list[PodProcesses]]:
    started: list[PodProcesses] = []
    yield started
    for p in started:
        p.close()


def test_a_request_wakes_a_fleet_at_zero_and_idleness_puts_it_back(
    kube_admin: KubeClient, kube_namespace: str, chart_access: ServiceAccountAccess, pods: list[PodProcesses],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    ns = kube_namespace
    monkeypatch.setenv("PAGED_ROUTER_CLUSTER_ROLE", "test-paged-router")  # as the chart sets it on the operator
    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path).start()
    try:
        _wake_and_sleep(kube_admin, ns, pods, tmp_path)
        operator.ensure_alive()
    finally:
        operator.stop()


def _wake_and_sleep(kube_admin: KubeClient, ns: str, pods: list[PodProcesses], tmp_path: Path) -> None:
    spec = {
        "replicas": {"min": 0, "max": 2},
        "router": {"enabled": True},
        "autoscaling": {"intervalSeconds": 5, "idleSeconds": IDLE_S},
    }
    kube_admin.create(md_path(ns), model_deployment(NAME, **spec))
    deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}"
    wait_for("the engine Deployment at 0", lambda: kube_admin.get(deployment)["spec"].get("replicas") == 0, 60)
    replica_port = free_port()

    def router(name: str, ip: str) -> list[list[str]]:  # the router container, at the router pod's IP
        return [[sys.executable, "-m", "paged_platform.router", "--host", ip, "--port", "8080",
                 "--endpoint", f"http://127.0.0.1:{replica_port}", "--probe-interval", "0.5",
                 "--queue-timeout", "120", "--log-level", "info"]]  # fmt: skip

    def engine(name: str, ip: str) -> list[list[str]]:
        return [[sys.executable, str(FAKE), "8000", name, ip], [sys.executable, str(FAKE), str(replica_port), name]]

    pods.append(PodProcesses(kube_admin, ns, f"paged.dev/router={NAME}", router, tmp_path))
    pods.append(PodProcesses(kube_admin, ns, f"paged.dev/model-deployment={NAME}", engine, tmp_path))
    routers = pods[0]
    ip = wait_for("the router pod runs", lambda: next(iter(routers.running.values()), (None,))[0], 120)
    url = f"http://{ip}:8080"
    wait_for("the router answers", lambda: _answers(f"{url}/health"), 60)
    ready = condition(kube_admin.get(md_path(ns, NAME)), "Ready")
    assert ready is not None and ready["reason"] == "ScaledToZero"

    result: dict[str, Any] = {}

    def send() -> None:
        body = {"model": FAKE_MODEL, "prompt": "wake up", "max_tokens": 2}
        result["response"] = httpx.post(f"{url}/v1/completions", json=body, timeout=150)

    sent_at = time.monotonic()
    client = threading.Thread(target=send)
    client.start()
    client.join(150)
    waited = time.monotonic() - sent_at
    response = result["response"]
    assert response.status_code == 200, response.text
    assert router_metric(url, "paged_router_cold_start_seconds_count") == 1
    cold_start = router_metric(url, "paged_router_cold_start_seconds_sum")
    assert 0 < cold_start <= waited
    print(f"cold start (first byte of the held request): {cold_start:.1f} s")
    obj = kube_admin.get(md_path(ns, NAME))
    woke = [d for d in obj["status"]["decisions"] if d["kind"] == "scale" and d["to"]["replicas"] == 1]
    assert woke and "held by the router" in woke[0]["reason"]

    # No more requests: back to zero after idleSeconds, and not before: the idle clock started no earlier than the
    # decision that saw the request held (both times as the operator recorded them in status.decisions).
    wait_for("back to zero", lambda: kube_admin.get(deployment)["spec"]["replicas"] == 0, IDLE_S + 90, interval_s=1)
    slept = kube_admin.get(md_path(ns, NAME))["status"]["decisions"][-1]
    assert slept["to"]["replicas"] == 0 and "scaling to zero" in slept["reason"]
    idle = datetime.fromisoformat(slept["time"]) - datetime.fromisoformat(woke[0]["time"])
    assert idle >= timedelta(seconds=IDLE_S), (woke[0], slept)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
