"""The operator under control-plane faults, on a control plane of this module's own (``kube_faulty_cluster``):
its API server stopped and started again on the same port with the same etcd, and its etcd frozen (SIGSTOP)
while the API server stays up.

Through both, while a ModelDeployment is autoscaled (stand-in engines at its kwok pods' IPs, whose queue the
test sets): the operator logs the skipped decisions (no tracebacks), keeps the replicas and budgets it had,
reports ``Degraded=True/APIUnavailable`` (and a Warning Event) as soon as it can write again, and recovers
without a restart: its watches reconnect, so a spec change made after the fault is reconciled and scaling
decisions go on. With leader election, a leader that cannot renew its Lease through the outage fences itself
(stops acting, exits 1 to be restarted), and exactly one replica leads afterwards.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from paged_operator.status import api_outage

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from e2e.cluster.controlplane import ControlPlane
from tests.operator_k8s.conftest import CHART_SERVICE_ACCOUNT, OperatorProcess, apply_crd
from tests.operator_k8s.helpers import condition, md_path, metric, model_deployment
from tests.operator_k8s.pod_processes import PodProcesses

pytestmark = [pytest.mark.k8s, pytest.mark.slow]
STAND_IN = Path(__file__).with_name("stand_in_engine.py")
NAME = "steady"
INTERVAL_S = 5
OUTAGE_S = 8  # over a decision's interval, and over the lease's duration
SPEC: dict[str, Any] = {
    "replicas": {"min": 1, "max": 3},
    "autoscaling": {
        "intervalSeconds": INTERVAL_S,
        "targets": {"waitingPerReplica": 2},
        "scaleUp": {"stabilizationWindowSeconds": 0},
        # Long enough that nothing scales down during the test unless a spec change says so.
        "scaleDown": {"stabilizationWindowSeconds": 3600},
    },
    "schedulerBudget": {"maxNumSeqs": 8, "maxNumBatchedTokens": 512},
}


# The operator fixtures (``conftest``) run on this module's control plane.
@pytest.fixture(scope="module")
def kube_cluster(kube_faulty_cluster: ControlPlane) -> ControlPlane:
    return kube_faulty_cluster


@pytest.fixture(scope="module")
def kube_admin(kube_cluster: ControlPlane) -> Iterator[KubeClient]:
    with kube_cluster.admin_client() as client:
        yield client


@pytest.fixture(scope="module")
def md_crd(kube_admin: KubeClient) -> str:
    return apply_crd(kube_admin)


#: Each API-server call of the operator (not its watches) gives up after this long: a frozen etcd then skips
#: decisions instead of holding one for the default 30 s.
OPERATOR_ARGS = ("--request-timeout", "3")


@pytest.fixture
def operator(chart_access: ServiceAccountAccess, kube_namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(chart_access.kubeconfig, kube_namespace, tmp_path, extra_args=OPERATOR_ARGS).start()
    yield proc
    proc.stop()


@pytest.fixture
def engines(kube_admin: KubeClient, kube_namespace: str, tmp_path: Path) -> Iterator[PodProcesses]:
    """A stand-in engine at each engine pod's IP, on the engine port."""

    def engine(name: str, ip: str) -> list[list[str]]:
        budget = SPEC["schedulerBudget"]
        return [
            [sys.executable, str(STAND_IN), ip, "8000", str(budget["maxNumSeqs"]), str(budget["maxNumBatchedTokens"])]
        ]

    pods = PodProcesses(kube_admin, kube_namespace, f"paged.dev/model-deployment={NAME}", engine, tmp_path)
    yield pods
    pods.close()


def set_waiting(pods: PodProcesses, waiting: int) -> None:
    """Sets every stand-in's queue; one just started for a new pod may not listen yet, so each is retried."""
    for ip in pods.ips():

        def post(ip: str = ip) -> bool:
            httpx.post(f"http://{ip}:8000/control", json={"waiting": waiting}, timeout=5).raise_for_status()
            return True

        wait_for(f"the stand-in at {ip} to take its queue", post, timeout_s=30)


def deployment(client: KubeClient, ns: str) -> dict[str, Any]:
    return client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")


def outage_reports(client: KubeClient, ns: str) -> tuple[int, str]:
    """How many times the operator reported an outage (its Warning Events are one series), and the last message."""
    events = client.get(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"reason={api_outage.REASON}")["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == NAME]
    return sum(e.get("count") or 1 for e in mine), mine[-1]["message"] if mine else ""


def test_the_operator_rides_out_an_api_server_restart_and_a_frozen_etcd(
    kube_faults: ControlPlane,
    kube_admin: KubeClient,
    kube_namespace: str,
    operator: OperatorProcess,
    engines: PodProcesses,
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment(NAME, **SPEC))

    def degraded() -> dict[str, Any] | None:
        return condition(kube_admin.get(md_path(ns, NAME)), "Degraded")

    def serving(count: int) -> bool:
        cond = degraded()
        return cond is not None and cond["reason"] == "MetricsAvailable" and cond["message"].startswith(f"{count}/")

    wait_for("one engine serving", lambda: serving(1), timeout_s=90, interval_s=0.5)
    set_waiting(engines, 6)  # 6 waiting on one replica, 2 per replica wanted: scale to 3
    wait_for("scaled to 3", lambda: deployment(kube_admin, ns)["spec"]["replicas"] == 3, timeout_s=60)
    set_waiting(engines, 0)  # idle, but the down-window holds the 3
    wait_for("three engines serving", lambda: serving(3), timeout_s=60, interval_s=0.5)
    budget = kube_admin.get(md_path(ns, NAME))["status"]["budget"]
    decisions = len(kube_admin.get(md_path(ns, NAME))["status"]["decisions"])

    for fault, (inject, repair) in {
        "API server down": (kube_faults.stop_apiserver, kube_faults.start_apiserver),
        "etcd frozen": (kube_faults.pause_etcd, kube_faults.resume_etcd),
    }.items():
        reported_before, _ = outage_reports(kube_admin, ns)
        injected = datetime.now(UTC).replace(microsecond=0)
        inject()
        time.sleep(OUTAGE_S)
        operator.ensure_alive()
        repair()

        # Reported once the operator can write again (the condition and an Event); the next decision clears it.
        def reported(before: int = reported_before) -> str | None:
            count, message = outage_reports(kube_admin, ns)
            return message if count > before else None

        message = wait_for(f"the {fault} reported", reported, timeout_s=60, interval_s=0.5)
        assert "skipped since" in message and "kept 3 replicas and budgets 8/512" in message, message
        wait_for(f"healthy after the {fault}", lambda: serving(3), timeout_s=60, interval_s=0.5)
        # Degraded went True (APIUnavailable, the message above) and back since the fault: it last changed after it.
        cond = degraded()
        assert cond is not None and datetime.fromisoformat(cond["lastTransitionTime"]) >= injected, cond
        obj = kube_admin.get(md_path(ns, NAME))
        assert deployment(kube_admin, ns)["spec"]["replicas"] == 3, f"the {fault} changed the replicas"
        assert obj["status"]["budget"] == budget, f"the {fault} changed the budgets"
        assert len(obj["status"]["decisions"]) == decisions, f"decisions made during the {fault}"

    # The watches came back: a spec change is seen and reconciled, and the autoscaler acts on it.
    kube_admin.patch(md_path(ns, NAME), {"spec": {"autoscaling": {"scaleDown": {"stabilizationWindowSeconds": 0}}}})
    wait_for("scaled down to 1", lambda: deployment(kube_admin, ns)["spec"]["replicas"] == 1, timeout_s=60)

    def recorded() -> dict[str, Any] | None:  # the status is written after the Deployment is scaled
        obj = kube_admin.get(md_path(ns, NAME))
        return obj if obj["status"]["decisions"][-1]["to"]["replicas"] == 1 else None

    obj = wait_for("the scale-down recorded", recorded, timeout_s=30)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 2

    operator.ensure_alive()
    assert operator.starts == 1  # recovered without a restart
    log = operator.log_path.read_text(errors="replace")
    assert "decision skipped" in log
    assert "Traceback" not in log, log[-6000:]


LEASE = CHART_SERVICE_ACCOUNT  # the chart names the Lease after the release
DURATION_S, DEADLINE_S, RETRY_S = 4, 3, 0.5


def leading(proc: OperatorProcess) -> bool:
    """Whether ``proc`` runs and says it leads (a process that just exited does not)."""
    if proc.process is None or proc.process.poll() is not None:
        return False
    try:
        return metric(proc, "paged_operator_leader") == 1
    except httpx.HTTPError:
        return False


def test_a_leader_that_cannot_renew_through_a_frozen_etcd_fences_itself_and_one_leader_resumes(
    kube_faults: ControlPlane,
    kube_admin: KubeClient,
    kube_namespace: str,
    chart_access: ServiceAccountAccess,
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    key = secrets.token_urlsafe(48)
    replicas = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "token-key").write_text(key)
        args = (*OPERATOR_ARGS, "--leader-election", "--lease-namespace", ns, "--lease-name", LEASE,
                "--lease-duration", str(DURATION_S), "--renew-deadline", str(DEADLINE_S),
                "--retry-period", str(RETRY_S))  # fmt: skip
        replicas.append(OperatorProcess(chart_access.kubeconfig, ns, tmp_path / name, extra_args=args))
    try:
        _fence_and_resume(kube_faults, kube_admin, ns, replicas)
    finally:
        for proc in replicas:
            proc.stop()


def _fence_and_resume(plane: ControlPlane, kube_admin: KubeClient, ns: str, replicas: list[OperatorProcess]) -> None:
    for proc in replicas:
        proc.start()

    def leaders() -> list[OperatorProcess]:
        now = [p for p in replicas if leading(p)]
        assert len(now) <= 1, "two replicas lead at once"
        return now

    first = wait_for("a leader", lambda: leaders()[0] if leaders() else None, timeout_s=30, interval_s=0.2)
    standby = next(p for p in replicas if p is not first)
    kube_admin.create(md_path(ns), model_deployment(NAME, replicas={"min": 1, "max": 1}))

    def observed(generation: int) -> bool:
        return (kube_admin.get(md_path(ns, NAME)).get("status") or {}).get("observedGeneration") == generation

    wait_for("the leader reconciles", lambda: observed(1), timeout_s=60, interval_s=0.5)
    lease = kube_admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}")["spec"]

    # etcd freezes: the leader cannot renew, stops acting at its renew deadline and exits 1 (its container
    # restarts), all while etcd is still frozen; the standby cannot take the Lease meanwhile (no write gets
    # through), and at no moment do two replicas lead.
    plane.pause_etcd()
    assert first.process is not None

    def fenced() -> bool:
        leaders()  # asserts at most one leads
        return first.process.poll() is not None

    wait_for("the leader to fence itself and exit while etcd is frozen", fenced, timeout_s=120, interval_s=0.2)
    assert first.process.returncode == 1, first.log()
    assert "lost the lease" in first.log()
    assert not leading(standby), "the standby leads while etcd is frozen"
    plane.resume_etcd()

    # Afterwards exactly one leader: the standby, once the Lease it last saw has gone unrenewed for its duration.
    assert wait_for("the standby leads", lambda: standby in leaders(), timeout_s=30, interval_s=0.2)
    first.start()  # restarted as a candidate: it stands by
    kube_admin.patch(md_path(ns, NAME), {"spec": {"replicas": {"min": 2, "max": 2}}})
    wait_for("the new leader reconciles", lambda: observed(2), timeout_s=60, interval_s=0.5)
    assert deployment(kube_admin, ns)["spec"]["replicas"] == 2
    assert leaders() == [standby]
    taken = kube_admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}")["spec"]
    assert taken["holderIdentity"] != lease["holderIdentity"]
    assert taken["leaseTransitions"] == lease.get("leaseTransitions", 0) + 1
