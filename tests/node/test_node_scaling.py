"""The autoscaler on the real node: a bounded load through the Service's ClusterIP scales the engines 1 -> 2, and
when the load falls the scale-down to 1 goes through the kubelet's preStop drain with no failed request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from e2e.cluster.client import has_condition, wait_for
from tests.node.conftest import MD_NAME, READY_TIMEOUT_S, SERVED_NAME, Deployed

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.slow, pytest.mark.gemma]

# Two sequences per engine step: six concurrent clients queue (waiting per replica > 1), while one client uses half
# of one replica's sequence budget (under the 0.9 target), so one replica suffices for it. The scale-up window and
# the interval are the API's shortest, so the test waits on the autoscaler's decisions more than on its damping.
MODEL_DEPLOYMENT_OVERRIDES = {
    "replicas": {"min": 1, "max": 2},
    "autoscaling": {
        "enabled": True,
        "intervalSeconds": 5,
        "targets": {"kvCacheUsage": 0.9, "waitingPerReplica": 1},
        "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 1},
        # Down only after 30 s of low readings: a loaded queue dips between readings, and a zero window would scale
        # down (and up again) on every dip.
        "scaleDown": {"stabilizationWindowSeconds": 30, "maxStep": 1},
    },
    "schedulerBudget": {"maxNumSeqs": 2, "maxNumBatchedTokens": 256},
}
HEAVY_CLIENTS = 6
LOAD_TIMEOUT_S = 240
# Generous: the shared 2-core machine can be loaded several times over, and a client that gives up leaves its
# request queued in the engine, which the autoscaler counts as load.
REQUEST_TIMEOUT_S = 300


@dataclass
class Load:
    """Clients that each send one completion at a time through the ClusterIP until stopped or out of time."""

    url: str
    clients: int
    max_tokens: int
    deadline_s: float
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _client(self) -> None:
        body = {"model": SERVED_NAME, "prompt": "Count: one two three", "max_tokens": self.max_tokens}
        end = time.monotonic() + self.deadline_s
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            while not self._stop.is_set() and time.monotonic() < end:
                try:
                    response = http.post(f"{self.url}/v1/completions", json=body)
                    failure = None if response.status_code == 200 else f"{response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if failure is None:
                        self.ok += 1
                    else:
                        self.failures.append(failure)

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=REQUEST_TIMEOUT_S)


@pytest.fixture(scope="module")
def ready(deployed: Deployed) -> Iterator[Deployed]:
    deployed.wait_ready(1)
    yield deployed


def desired_replicas(deployed: Deployed) -> int:
    deployment = deployed.admin.get(f"/apis/apps/v1/namespaces/{deployed.namespace}/deployments/{MD_NAME}")
    return deployment["spec"].get("replicas", 0)


def set_replica_bounds(deployed: Deployed, low: int, high: int) -> None:
    path = f"/apis/paged.dev/v1alpha1/namespaces/{deployed.namespace}/modeldeployments/{MD_NAME}"
    deployed.admin.patch(path, {"spec": {"replicas": {"min": low, "max": high}}})


def pin_at(deployed: Deployed, replicas: int) -> list[dict]:
    """Each test's starting point, whatever ran before it: the bounds pinned at ``replicas`` (the clamp to them
    always wins over the autoscaler), and that many Ready engine pods with none terminating. The test hands the
    autoscaler the module's bounds back (:func:`release_bounds`) when it wants it to act."""

    def settled() -> list[dict] | None:
        pods = deployed.admin.get(
            f"/api/v1/namespaces/{deployed.namespace}/pods", labelSelector=f"app.kubernetes.io/instance={MD_NAME}"
        )["items"]  # terminating ones too: a pod still draining is not a settled fleet
        ready = [p for p in pods if has_condition(p, "Ready") and not p["metadata"].get("deletionTimestamp")]
        return ready if len(ready) == len(pods) == replicas == desired_replicas(deployed) else None

    set_replica_bounds(deployed, replicas, replicas)
    try:
        return wait_for(f"{replicas} Ready engine pod(s), none terminating", settled, READY_TIMEOUT_S, interval_s=1)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{deployed.describe()}") from None


def release_bounds(deployed: Deployed) -> None:
    bounds = MODEL_DEPLOYMENT_OVERRIDES["replicas"]
    set_replica_bounds(deployed, bounds["min"], bounds["max"])


def test_bounded_load_scales_one_to_two(ready: Deployed):
    pin_at(ready, 1)
    release_bounds(ready)
    with Load(ready.service_url(), HEAVY_CLIENTS, max_tokens=16, deadline_s=LOAD_TIMEOUT_S) as load:
        wait_for("the autoscaler to ask for 2 replicas", lambda: desired_replicas(ready) == 2, LOAD_TIMEOUT_S, 1)
        pods = ready.wait_ready(2)
    assert {p["spec"]["nodeName"] for p in pods} == {ready.node.name}
    assert load.ok > 0 and not load.failures, load.failures[:5]


def test_scale_down_drains_with_no_failed_request(ready: Deployed):
    before = {p["metadata"]["name"] for p in pin_at(ready, 2)}
    with Load(ready.service_url(), clients=1, max_tokens=8, deadline_s=LOAD_TIMEOUT_S) as load:
        release_bounds(ready)  # under light load: the autoscaler may now scale down
        wait_for("the autoscaler to ask for 1 replica", lambda: desired_replicas(ready) == 1, LOAD_TIMEOUT_S, 1)

        def one_left() -> list[dict] | None:
            pods = ready.admin.get(
                f"/api/v1/namespaces/{ready.namespace}/pods", labelSelector=f"app.kubernetes.io/instance={MD_NAME}"
            )["items"]
            return pods if len(pods) == 1 else None

        try:
            (survivor,) = wait_for("the scaled-down pod to drain and go", one_left, timeout_s=180, interval_s=1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{ready.describe()}") from None
        time.sleep(3)  # requests keep flowing to the survivor
    assert survivor["metadata"]["name"] in before
    assert load.ok > 0
    assert not load.failures, f"{len(load.failures)} failed requests during the scale-down: {load.failures[:5]}"
