"""Two operator replicas on one Lease (the chart's RBAC): only the holder acts; killed mid-reconcile, the standby
takes over once the lease has gone unrenewed for its duration (as the Lease records it) and finishes the work;
stopped, the leader releases the Lease so the standby need not wait it out."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import CHART_SERVICE_ACCOUNT, OperatorProcess
from tests.operator_k8s.helpers import md_path, metric, model_deployment, settle

pytestmark = pytest.mark.k8s
LEASE = CHART_SERVICE_ACCOUNT  # the chart names the Lease after the release: "test-paged"
DURATION_S, DEADLINE_S, RETRY_S = 4, 3, 0.5


def lease_path(ns: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}"


def lease_time(value: str) -> datetime:
    """A Lease's MicroTime (RFC 3339 with microseconds)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def acted(proc: OperatorProcess) -> float:
    """Handler runs (reconciles and decisions) of this replica."""
    return metric(proc, "paged_operator_reconciles_total")


@pytest.fixture
def replicas(
    chart_access: ServiceAccountAccess, kube_namespace: str, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    key = secrets.token_urlsafe(48)  # the chart mounts one key into every replica
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "token-key").write_text(key)
        args = ("--leader-election", "--lease-namespace", kube_namespace, "--lease-name", LEASE,
                "--lease-duration", str(DURATION_S), "--renew-deadline", str(DEADLINE_S),
                "--retry-period", str(RETRY_S))  # fmt: skip
        procs.append(OperatorProcess(chart_access.kubeconfig, kube_namespace, tmp_path / name, extra_args=args))
    yield procs
    for proc in procs:
        proc.stop()


def test_one_replica_acts_and_the_standby_takes_over(
    kube_admin: KubeClient, kube_namespace: str, replicas: list[OperatorProcess]
) -> None:
    ns = kube_namespace
    for proc in replicas:
        proc.start()

    def leader() -> OperatorProcess | None:
        leading = [p for p in replicas if p.process and p.process.poll() is None and metric(p, "paged_operator_leader")]
        assert len(leading) <= 1, "two replicas lead at once"
        return leading[0] if leading else None

    first = wait_for("a leader", leader, timeout_s=30, interval_s=0.2)
    standby = next(p for p in replicas if p is not first)
    lease = kube_admin.get(lease_path(ns))
    assert lease["spec"]["leaseDurationSeconds"] == DURATION_S

    kube_admin.create(md_path(ns), model_deployment("ha", replicas={"min": 2, "max": 2}))
    deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/ha"

    def observed(generation: int) -> bool:
        return (kube_admin.get(md_path(ns, "ha")).get("status") or {}).get("observedGeneration") == generation

    wait_for("the leader reconciles", lambda: observed(1), timeout_s=60, interval_s=0.5)
    assert kube_admin.get(deployment)["spec"]["replicas"] == 2
    assert acted(first) > 0 and acted(standby) == 0 and leader() is first

    # Killed (no release) right after a spec edit, possibly mid-reconcile: the standby takes over once the
    # lease has gone unrenewed for its duration, and finishes the edit.
    kube_admin.patch(md_path(ns, "ha"), {"spec": {"replicas": {"min": 3, "max": 3}}})
    assert first.process is not None
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    last_renewed = kube_admin.get(lease_path(ns))["spec"]  # the killed leader's last write: nobody renews it now
    assert last_renewed["holderIdentity"] == lease["spec"]["holderIdentity"]
    assert wait_for("the standby leads", lambda: leader() is standby, timeout_s=60, interval_s=0.2)
    taken = kube_admin.get(lease_path(ns))["spec"]
    assert taken["holderIdentity"] not in (None, "", lease["spec"]["holderIdentity"])
    assert taken["leaseTransitions"] == lease["spec"].get("leaseTransitions", 0) + 1
    # Taken only once the lease had gone a whole duration without renewal (both times as the Lease records them):
    # the standby waited the lease out rather than taking it from a leader that might still be acting.
    unrenewed = lease_time(taken["acquireTime"]) - lease_time(last_renewed["renewTime"])
    assert unrenewed >= timedelta(seconds=last_renewed["leaseDurationSeconds"]), (last_renewed, taken)
    wait_for("the spec edit is finished", lambda: observed(2), timeout_s=60, interval_s=0.5)
    assert kube_admin.get(deployment)["spec"]["replicas"] == 3

    # The killed replica comes back (its container restarted) as a candidate: it stands by, acting on nothing.
    first.start()
    before = acted(standby)
    kube_admin.patch(md_path(ns, "ha"), {"spec": {"replicas": {"min": 1, "max": 1}}})
    wait_for("the leader reconciles again", lambda: observed(3), timeout_s=60, interval_s=0.5)
    settle(2 * RETRY_S)
    assert acted(first) == 0 and acted(standby) > before and leader() is standby

    # A leader that stops releases the Lease (no holder), so the standby need not wait it out: it takes over at its
    # next retry (a released lease is taken at once: test_operator_lease.py). The candidate is frozen meanwhile, so
    # the release is seen in the Lease itself before anyone takes it.
    assert first.process is not None
    first.process.send_signal(signal.SIGSTOP)
    try:
        standby.stop(signal.SIGTERM)
        assert standby.process is not None and standby.process.returncode == 0, standby.log()
        assert "released the lease" in standby.log()
        released = kube_admin.get(lease_path(ns))["spec"]
        assert not released.get("holderIdentity"), released
    finally:
        first.process.send_signal(signal.SIGCONT)
    assert wait_for("the restarted replica leads", lambda: leader() is first, timeout_s=60, interval_s=0.2)
    assert kube_admin.get(lease_path(ns))["spec"]["leaseTransitions"] == released["leaseTransitions"] + 1
    kube_admin.patch(md_path(ns, "ha"), {"spec": {"replicas": {"min": 2, "max": 2}}})
    wait_for("the new leader reconciles", lambda: observed(4), timeout_s=60, interval_s=0.5)
