"""The whole loop: the operator (chart RBAC) scales real engine processes serving a tiny model at their pod IPs.

Load drives KV usage and queues up: replicas go up and the budget tuner changes the budget (both recorded in
status with reasons, and as Events); load stops: replicas come back down once the down-window has passed.
There is no kube-proxy on the test bed (and loopback pod IPs get no endpoints), so load goes to the pods' IPs
round-robin, as a client-side load balancer would.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.episode import write_episode
from tests.operator_k8s.fake_kubelet import FakeKubelet
from tests.operator_k8s.helpers import condition, md_path, model_deployment
from tests.server.conftest import tiny_gemma_dir  # noqa: F401  (fixture)

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.server, pytest.mark.gemma]

NAME = "tiny"
DOWN_WINDOW_S = 20
SPEC: dict[str, Any] = {
    "model": {"servedName": "tiny"},
    # ~2k tokens of KV per engine: a couple of dozen concurrent requests fill it.
    "engine": {"maxModelLen": 512, "kvCacheMemory": "1Mi", "extraArgs": ["--attention-backend", "reference"]},
    "replicas": {"min": 1, "max": 3},
    "autoscaling": {
        "intervalSeconds": 5,
        "targets": {"kvCacheUsage": 0.5, "waitingPerReplica": 2},
        "scaleUp": {"stabilizationWindowSeconds": 5},
        "scaleDown": {"stabilizationWindowSeconds": DOWN_WINDOW_S},
    },
    "schedulerBudget": {
        "maxNumSeqs": 8,
        "maxNumBatchedTokens": 512,
        "adaptive": {
            "enabled": True,
            "maxNumSeqs": {"min": 2, "max": 32},
            "maxNumBatchedTokens": {"min": 256, "max": 2048},
        },
    },
}


class Load:
    """``workers`` clients sending completions round-robin to the engines the fake kubelet runs."""

    def __init__(self, kubelet: FakeKubelet, workers: int) -> None:
        self._kubelet = kubelet
        self._stop = threading.Event()
        self._counter = itertools.count()
        self.ok = 0
        self.failed = 0
        self.stop_requested: float | None = None
        self._threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(workers)]
        for thread in self._threads:
            thread.start()

    def _worker(self) -> None:
        body = {"model": "tiny", "prompt": "the quick brown fox " * 8, "max_tokens": 200, "ignore_eos": True}
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                engines = self._kubelet.engines()
                if not engines:
                    time.sleep(0.2)
                    continue
                engine = engines[next(self._counter) % len(engines)]
                try:
                    client.post(f"{engine.url}/v1/completions", json=body).raise_for_status()
                    self.ok += 1
                except httpx.HTTPError:
                    self.failed += 1
                    time.sleep(0.2)

    def stop(self) -> None:
        """Stop sending; returns once in-flight requests finish (200-token ones can take several seconds)."""
        self.stop_requested = time.time()
        self._stop.set()
        for thread in self._threads:
            thread.join(150)


@pytest.fixture
def kubelet(kube_admin: KubeClient, kube_namespace: str, tiny_gemma_dir: Path, tmp_path: Path) -> Iterator[FakeKubelet]:  # noqa: F811
    fake = FakeKubelet(kube_admin, kube_namespace, f"paged.dev/model-deployment={NAME}", tiny_gemma_dir, tmp_path)
    yield fake
    fake.close()


def replicas(client: KubeClient, ns: str) -> int:
    return client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")["spec"]["replicas"]


def decisions(client: KubeClient, ns: str, kind: str) -> list[dict[str, Any]]:
    status = client.get(md_path(ns, NAME)).get("status") or {}
    return [d for d in status.get("decisions", []) if d["kind"] == kind and not d.get("dryRun")]


def engines_agree(client: KubeClient, ns: str, kubelet: FakeKubelet) -> bool:
    """Every serving engine reports the budget in status (pushed live, or started with it from the ConfigMap)."""
    budget = (client.get(md_path(ns, NAME)).get("status") or {}).get("budget") or {}
    config = client.get(f"/api/v1/namespaces/{ns}/configmaps/{NAME}-engine")["data"]
    if str(budget.get("maxNumSeqs")) != config["maxNumSeqs"]:
        return False
    checked = 0
    for engine in kubelet.engines():
        try:
            if httpx.get(f"{engine.url}/ready", timeout=2).status_code != 200:
                continue  # still loading: it reads the ConfigMap's budget when it starts
        except httpx.HTTPError:
            continue
        text = httpx.get(f"{engine.url}/metrics", timeout=5).text
        found = re.search(r"^paged_scheduler_max_num_seqs(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE)
        if found is None or float(found.group(1)) != budget["maxNumSeqs"]:
            return False
        checked += 1
    return checked > 0


def test_load_scales_up_and_tunes_then_scales_down_after_the_window(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, kubelet: FakeKubelet
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment(NAME, **SPEC))

    def one_ready() -> bool:
        obj = kube_admin.get(md_path(ns, NAME))
        ready = condition(obj, "Ready")
        return bool(ready and ready["status"] == "True" and obj["status"].get("metrics"))

    wait_for("one engine ready and scraped", one_ready, timeout_s=240, interval_s=1)
    assert replicas(kube_admin, ns) == 1

    load = Load(kubelet, workers=24)
    try:
        wait_for("a scale-up", lambda: replicas(kube_admin, ns) >= 2, timeout_s=240, interval_s=1)
        wait_for("a budget decision", lambda: decisions(kube_admin, ns, "budget"), timeout_s=120, interval_s=1)
        wait_for("the new replicas serving", lambda: len(kubelet.engines()) >= 2, timeout_s=120, interval_s=1)
        wait_for("every engine running the budget in status", lambda: engines_agree(kube_admin, ns, kubelet), 60, 1)
        time.sleep(10)  # the new engines take load for a couple of decisions
    finally:
        load.stop()
    # Load starts to fall when no new requests are sent, not when the last in-flight one has finished.
    assert load.stop_requested is not None
    stopped = load.stop_requested
    assert load.ok > 0, f"no request succeeded ({load.failed} failed); kubelet errors: {kubelet.errors}"

    wait_for("scaled back down to 1", lambda: replicas(kube_admin, ns) == 1, timeout_s=240, interval_s=1)

    ups = [d for d in decisions(kube_admin, ns, "scale") if d["to"]["replicas"] > d["from"]["replicas"]]
    downs = [d for d in decisions(kube_admin, ns, "scale") if d["to"]["replicas"] < d["from"]["replicas"]]
    assert ups and downs and decisions(kube_admin, ns, "budget")
    assert all(d["reason"] and d["signals"] for d in ups + downs)
    # Nothing came down before the load had been gone for a whole down-window.
    assert datetime.fromisoformat(downs[0]["time"]).timestamp() >= stopped + DOWN_WINDOW_S - 5
    events = kube_admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={NAME}")["items"]
    reasons = {e["reason"] for e in events}
    assert {"Scaled", "BudgetChanged"} <= reasons
    metrics = operator.metrics()
    assert 'paged_operator_decisions_total{dry_run="false",kind="scale"' in metrics

    out = os.environ.get("PAGED_EPISODE_OUT")
    if out:
        write_episode(Path(out), kube_admin.get(md_path(ns, NAME)), load_stopped=stopped)
