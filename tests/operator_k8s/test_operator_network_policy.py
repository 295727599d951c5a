"""``spec.networkPolicy`` on the real control plane: the operator, as the chart's ServiceAccount and with the chart's
flags, creates the engines' NetworkPolicy, puts it back when it is deleted or opened by hand, deletes it once the
spec turns it off, and leaves a policy of the same name that it does not own alone. (Whether traffic is then
refused is the network plugin's business: none runs on kwok nodes.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from paged_operator.drift import drifted_fields
from paged_operator.handlers import parse
from paged_operator.render.network_policy import network_policy
from paged_operator.render.settings import NetworkPeers, labelled_peer, operator_peer

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import get_or_none, md_path, model_deployment, settle
from tests.operator_k8s.test_operator_drift import repair_decisions, repairs

pytestmark = pytest.mark.k8s
NAME = "guarded"
OPERATOR_NAMESPACE = "paged-system"  # the operator's $POD_NAMESPACE, as the chart sets it
OPERATOR_LABELS = {"app.kubernetes.io/name": "paged", "app.kubernetes.io/component": "operator"}
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
FLAGS = (
    *(f"--operator-pod-label={k}={v}" for k, v in OPERATOR_LABELS.items()),
    *(f"--prometheus-pod-label={k}={v}" for k, v in PROMETHEUS_LABELS.items()),
)


def policy_path(ns: str, name: str = NAME) -> str:
    return f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}"


def rendered(client: KubeClient, ns: str) -> dict[str, Any]:
    """The policy the operator renders for the object as it is now, with the peers FLAGS give it."""
    body = client.get(md_path(ns, NAME))
    peers = NetworkPeers(operator_peer(OPERATOR_NAMESPACE, OPERATOR_LABELS), labelled_peer({}, PROMETHEUS_LABELS))
    policy = network_policy(parse(body), body["metadata"]["uid"], peers)
    assert policy is not None
    return policy


def recreated(client: KubeClient, path: str, old_uid: str) -> bool:
    child = get_or_none(client, path)
    return child is not None and child["metadata"]["uid"] != old_uid


def repair_recorded(client: KubeClient, ns: str, what: str) -> bool:
    """A repair of the policy is in the decision history and its Event says ``what``."""
    recorded = any(d["reason"].startswith(f"NetworkPolicy {NAME} ") for d in repair_decisions(client, ns, NAME))
    return recorded and any(what in e["message"] and "NetworkPolicy" in e["message"] for e in repairs(client, ns, NAME))


def observed(client: KubeClient, ns: str, generation: int) -> bool:
    return (client.get(md_path(ns, NAME)).get("status") or {}).get("observedGeneration") == generation


def test_the_policy_follows_the_spec_and_is_put_back_when_deleted_or_opened(
    kube_admin: KubeClient,
    kube_namespace: str,
    chart_access: ServiceAccountAccess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = kube_namespace
    monkeypatch.setenv("PAGED_ROUTER_CLUSTER_ROLE", "test-paged-router")  # as the chart sets them on the operator
    monkeypatch.setenv("POD_NAMESPACE", OPERATOR_NAMESPACE)
    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path, extra_args=FLAGS).start()
    try:
        spec = {"router": {"enabled": True}, "networkPolicy": {"enabled": True}, "autoscaling": {"intervalSeconds": 5}}
        owner = kube_admin.create(md_path(ns), model_deployment(NAME, **spec))
        path = policy_path(ns)
        live = wait_for("the NetworkPolicy", lambda: get_or_none(kube_admin, path), 60)
        (ref,) = live["metadata"]["ownerReferences"]
        assert ref["uid"] == owner["metadata"]["uid"] and ref["controller"] is True
        wanted = rendered(kube_admin, ns)
        assert drifted_fields(wanted, live) == []  # as rendered, the API server's defaults aside
        assert len(live["spec"]["ingress"]) == 3  # the router, the operator, Prometheus
        settle(3)
        assert not repairs(kube_admin, ns, NAME)  # what the API server stores is no drift

        uid = live["metadata"]["uid"]
        kube_admin.delete(path)
        wait_for("the NetworkPolicy created again", lambda: recreated(kube_admin, path, uid), 30)
        wait_for("the deletion's repair recorded", lambda: repair_recorded(kube_admin, ns, "was deleted"), 30)

        kube_admin.patch(path, {"spec": {"ingress": [{}]}})  # opened to every client, by hand
        wait_for("the policy closed again", lambda: drifted_fields(wanted, kube_admin.get(path)) == [], 30)
        wait_for("the edit's repair recorded", lambda: repair_recorded(kube_admin, ns, "changed by hand"), 30)

        kube_admin.patch(md_path(ns, NAME), {"spec": {"networkPolicy": {"enabled": False}}})
        wait_for("the NetworkPolicy deleted", lambda: not kube_admin.exists(path), 60)
        assert kube_admin.exists(f"/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")  # the engines stay

        # A policy of the same name that is not the operator's is left alone by the next reconcile.
        stranger = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": NAME},
                    "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}  # fmt: skip
        kube_admin.create(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", stranger)
        generation = kube_admin.patch(md_path(ns, NAME), {"spec": {"replicas": {"max": 2}}})["metadata"]["generation"]
        wait_for("the next generation reconciled", lambda: observed(kube_admin, ns, generation), 60)
        assert kube_admin.exists(path)
        operator.ensure_alive()
    finally:
        operator.stop()
