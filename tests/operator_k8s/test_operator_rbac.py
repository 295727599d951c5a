"""The operator needs every permission the chart grants: take one away and reconciling fails visibly (a Warning
Event naming the refused resource), without crashing the operator. The other cluster tests run with the chart's
RBAC as rendered, so a permission the chart lacks fails them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.binaries import Binaries
from e2e.cluster.client import ApiError, KubeClient, wait_for
from e2e.cluster.helm import render_chart
from tests.operator_k8s.conftest import CHART, OperatorProcess
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s


def chart_rules(binaries: Binaries, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(namespaced Role rules, ClusterRole rules) of the chart installed to watch ``namespace``."""
    objects = render_chart(binaries.helm, CHART, "test", namespace, set_values={"watchNamespace": namespace})
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "test-paged"]
    # The operator's ClusterRole ("<release>-paged"), not the one the chart writes for router pods.
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "test-paged"]
    return role["rules"], cluster_role["rules"]


def test_a_permission_missing_from_the_chart_fails_reconciling_visibly(
    kube_admin: KubeClient,
    kube_namespace: str,
    kube_binaries: Binaries,
    kube_service_account: Any,
    md_crd: str,
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    rules, cluster_rules = chart_rules(kube_binaries, ns)
    without_pdbs = [r for r in rules if "poddisruptionbudgets" not in r["resources"]]
    assert len(without_pdbs) == len(rules) - 1
    access = kube_service_account("short-of-pdbs", rules=without_pdbs, cluster_rules=cluster_rules)
    operator = OperatorProcess(access.kubeconfig, ns, tmp_path).start()
    try:
        kube_admin.create(md_path(ns), model_deployment("denied"))

        def forbidden_event() -> dict[str, Any] | None:
            events = kube_admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector="involvedObject.name=denied")
            return next(
                (e for e in events["items"] if e["type"] == "Warning" and "poddisruptionbudgets" in e["message"]),
                None,
            )

        event = wait_for("a Warning event about the refused PodDisruptionBudget", forbidden_event, timeout_s=60)
        assert "forbidden" in event["message"].lower()
        # Children after the refused one were not created, and the operator stays up to retry.
        assert not kube_admin.exists(f"/apis/apps/v1/namespaces/{ns}/deployments/denied")
        operator.ensure_alive()
    finally:
        operator.stop()


@pytest.mark.parametrize("watch_namespace", [False, True], ids=["cluster", "namespaced"])
def test_the_operator_cannot_read_any_secret(
    kube_admin: KubeClient, kube_namespace: str, kube_chart_access: Any, md_crd: str, watch_namespace: bool
) -> None:
    """Admin tokens are derived from the operator's mounted key: its identity reads no Secret, neither someone
    else's nor the token Secrets it creates (in cluster-wide mode that would be every Secret of the cluster)."""
    ns = kube_namespace
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    foreign = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "foreign"}, "stringData": {"password": "x"}}
    kube_admin.create(secrets, foreign)
    access = kube_chart_access(CHART, "test-paged", set_values={"watchNamespace": ns} if watch_namespace else None)
    with access.client() as sa:
        for read in (lambda: sa.get(f"{secrets}/foreign"), lambda: sa.get(secrets)):
            with pytest.raises(ApiError) as refused:
                read()
            assert refused.value.code == 403


def allowed(client: KubeClient, verb: str, namespace: str) -> bool:
    """Whether ``client``'s identity may ``verb`` NetworkPolicies in ``namespace`` (a SelfSubjectAccessReview)."""
    attributes = {"verb": verb, "group": "networking.k8s.io", "resource": "networkpolicies", "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attributes}}  # fmt: skip
    return client.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"]["allowed"]


@pytest.mark.parametrize("watch_namespace", [False, True], ids=["cluster", "namespaced"])
def test_the_operator_may_do_to_network_policies_what_spec_network_policy_needs_and_no_more(
    kube_namespace: str, kube_chart_access: Any, md_crd: str, watch_namespace: bool
) -> None:
    """Applied (create, patch), watched for drift (list, watch), looked up and deleted once disabled (get, delete);
    never replaced whole or deleted by the collection."""
    ns = kube_namespace
    access = kube_chart_access(CHART, "test-paged", set_values={"watchNamespace": ns} if watch_namespace else None)
    with access.client() as sa:
        for verb in ("create", "patch", "list", "watch", "get", "delete"):
            assert allowed(sa, verb, ns), verb
        for verb in ("update", "deletecollection"):
            assert not allowed(sa, verb, ns), verb
        assert allowed(sa, "watch", "default") is not watch_namespace  # a namespaced install: its namespace only
