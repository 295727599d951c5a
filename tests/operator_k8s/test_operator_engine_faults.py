"""The operator against engines that misbehave (real API server, a real engine at the pod's IP with faults injected
by ``engine_faults/sitecustomize.py``): a ``/metrics`` that answers garbage or hangs, and a budget push that
times out. The operator logs, keeps the replicas it had, reports ``Degraded`` with the reason, and recovers on
its own once the engine does, without a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.fake_kubelet import FakeKubelet
from tests.operator_k8s.helpers import condition, md_path, model_deployment
from tests.server.conftest import tiny_gemma_dir  # noqa: F401  (fixture)

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.server, pytest.mark.gemma]

NAME = "faulty"
FAULTS_DIR = Path(__file__).parent / "engine_faults"
SPEC: dict[str, Any] = {
    "model": {"servedName": "tiny"},
    "engine": {"maxModelLen": 256, "kvCacheMemory": "1Mi", "extraArgs": ["--attention-backend", "reference"]},
    "replicas": {"min": 1, "max": 1},
    "autoscaling": {"intervalSeconds": 5},
    "schedulerBudget": {"maxNumSeqs": 8, "maxNumBatchedTokens": 512},
}


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the engines read their faults from; engines started from now on load the fault hooks (the
    operator, already running, does not)."""
    path = tmp_path / "faults"
    path.write_text("")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAULTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PAGED_TEST_FAULTS", str(path))
    return path


@pytest.fixture
def kubelet(
    kube_admin: KubeClient,
    kube_namespace: str,
    tiny_gemma_dir: Path,  # noqa: F811
    tmp_path: Path,
    faults: Path,
) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(kube_admin, kube_namespace, f"paged.dev/model-deployment={NAME}", tiny_gemma_dir, tmp_path)
    yield fake
    fake.close()


def degraded(client: KubeClient, ns: str) -> dict[str, Any] | None:
    return condition(client.get(md_path(ns, NAME)), "Degraded")


def wait_degraded(client: KubeClient, ns: str, status: str, reason: str, text: str = "", timeout_s: float = 60) -> str:
    def matches() -> str | None:
        cond = degraded(client, ns)
        ok = cond is not None and cond["status"] == status and cond["reason"] == reason and text in cond["message"]
        return cond["message"] if ok else None

    return wait_for(f"Degraded={status} ({reason}, {text!r})", matches, timeout_s=timeout_s)


def replicas(client: KubeClient, ns: str) -> int:
    return client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")["spec"]["replicas"]


def test_garbage_or_hanging_metrics_and_a_hanging_budget_push_degrade_then_recover(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, kubelet: FakeKubelet, faults: Path
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment(NAME, **SPEC))
    wait_degraded(kube_admin, ns, "False", "MetricsAvailable", "1/1", timeout_s=600)  # the engine serves

    faults.write_text("metrics=garbage\n")
    message = wait_degraded(kube_admin, ns, "True", "MetricsUnavailable")
    assert "0/1 ready replicas answered" in message
    faults.write_text("metrics=hang\n")
    wait_degraded(kube_admin, ns, "True", "MetricsUnavailable", "no answer within")
    time.sleep(12)  # a few decisions on no data: the replicas it had stay
    assert replicas(kube_admin, ns) == 1
    operator.ensure_alive()

    faults.write_text("")
    wait_degraded(kube_admin, ns, "False", "MetricsAvailable", "1/1")

    faults.write_text("budgets=hang\n")  # the next push (to the spec's new budget) gets no answer
    patch = {"spec": {"schedulerBudget": {"maxNumSeqs": 6, "maxNumBatchedTokens": 512}}}
    kube_admin.patch(md_path(ns, NAME), patch)
    wait_degraded(kube_admin, ns, "True", "BudgetPushFailed", "no answer within")
    assert replicas(kube_admin, ns) == 1
    faults.write_text("")
    wait_degraded(kube_admin, ns, "False", "MetricsAvailable", "1/1")  # pushed on a later decision
    metrics = httpx.get(f"{kubelet.engines()[0].url}/metrics", timeout=5).text.splitlines()
    assert any(line.startswith("paged_scheduler_max_num_seqs") and line.endswith(" 6.0") for line in metrics)
    operator.ensure_alive()
    assert operator.starts == 1  # recovered without a restart
    log = operator.log_path.read_text(errors="replace")  # the whole log (``log()`` keeps its tail)
    assert "metrics scrape failed" in log and "budget push failed" in log
