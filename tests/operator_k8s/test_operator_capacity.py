"""Replicas the cluster has no room for: kwok nodes have no GPUs, so a pod asking for one stays Pending."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import condition, md_path, model_deployment, settle

pytestmark = pytest.mark.k8s


def test_unschedulable_replicas_report_insufficient_resources_and_are_not_added_to(
    kube_admin: KubeClient, kube_namespace: str, chart_access: ServiceAccountAccess, tmp_path: Path
) -> None:
    ns = kube_namespace
    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path, extra_args=("--pending-timeout", "2")).start()
    try:
        spec = {"replicas": {"min": 1, "max": 4}, "autoscaling": {"intervalSeconds": 5}}
        kube_admin.create(
            md_path(ns), model_deployment("no-gpu", resources={"cpu": "100m", "memory": "128Mi", "gpus": 1}, **spec)
        )

        def insufficient() -> dict[str, Any] | None:
            limited = condition(kube_admin.get(md_path(ns, "no-gpu")), "ScalingLimited")
            return limited if limited and limited["reason"] == "InsufficientResources" else None

        limited = wait_for("ScalingLimited=InsufficientResources", insufficient, timeout_s=90, interval_s=1)
        assert limited["status"] == "True"
        assert "cannot be scheduled" in limited["message"] and "nvidia.com/gpu" in limited["message"]
        settle(12)  # two more decisions: the pending replica is kept, none is added next to it
        dep = kube_admin.get(f"/apis/apps/v1/namespaces/{ns}/deployments/no-gpu")
        assert dep["spec"]["replicas"] == 1
        operator.ensure_alive()
    finally:
        operator.stop()
