"""The chart's allow-lists through the real control plane: a ModelDeployment naming a hostPath or another
ServiceAccount gets no pods (Ready=False NotAllowed, naming the value and the chart value, and an Event); an operator
whose policy allows it applies it."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import condition, get_or_none, md_path, model_deployment, settle

pytestmark = pytest.mark.k8s

HOST_PATH = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}


def test_a_host_path_is_refused_then_applied_once_the_policy_allows_it(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("hostile", pod=HOST_PATH))

    def refused() -> dict[str, object] | None:
        cond = condition(kube_admin.get(md_path(ns, "hostile")), "Ready")
        return cond if cond and cond["reason"] == "NotAllowed" else None

    cond = wait_for("Ready=False NotAllowed", refused, 60)
    assert "hostPath volume" in cond["message"] and "policy.allowedVolumeTypes" in cond["message"]
    events = kube_admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector="involvedObject.name=hostile")["items"]
    assert any(e["reason"] == "NotAllowed" and e["type"] == "Warning" for e in events)
    settle(2)
    assert get_or_none(kube_admin, f"/apis/apps/v1/namespaces/{ns}/deployments/hostile") is None

    operator.stop()  # the platform team widens the chart's policy: the operator restarts with it
    allowing = OperatorProcess(operator.kubeconfig, ns, tmp_path, extra_args=("--allowed-volume-type", "hostPath"))
    allowing.start()
    try:
        dep = wait_for(
            "the Deployment", lambda: get_or_none(kube_admin, f"/apis/apps/v1/namespaces/{ns}/deployments/hostile"), 60
        )
        volumes = {v["name"] for v in dep["spec"]["template"]["spec"]["volumes"]}
        assert "root" in volumes
    finally:
        allowing.stop()


def test_another_service_account_is_refused(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("borrowed", pod={"serviceAccountName": "ci-deployer"}))

    def refused() -> dict[str, object] | None:
        cond = condition(kube_admin.get(md_path(ns, "borrowed")), "Ready")
        return cond if cond and cond["reason"] == "NotAllowed" else None

    cond = wait_for("Ready=False NotAllowed", refused, 60)
    assert "'ci-deployer'" in cond["message"] and "policy.allowedServiceAccounts" in cond["message"]
