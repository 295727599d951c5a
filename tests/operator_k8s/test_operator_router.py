"""``spec.router``: the operator, as the chart's ServiceAccount, deploys the router (its account bound to the
chart's router ClusterRole in the namespace, its Deployment, Service and PodDisruptionBudget), points the status
endpoint at it, keeps the engines' Service in-cluster behind it, and removes it all when the router is disabled
again."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s
ROUTER_ROLE = "test-paged-router"  # the chart's "<release>-paged-router" for release "test"


def router_paths(ns: str) -> dict[str, str]:
    return {
        "ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts/gemma-router",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/gemma-router",
        "Service": f"/api/v1/namespaces/{ns}/services/gemma-router",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/gemma-router",
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments/gemma-router",
    }


def can(client: KubeClient, ns: str, attributes: dict[str, str]) -> bool:
    """Whether the router's ServiceAccount may do this in ``ns`` (a SubjectAccessReview, asked as admin)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{ns}:gemma-router",
            "resourceAttributes": {**attributes, "namespace": ns},
        },
    }
    return bool(client.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get("allowed"))


def test_the_router_is_deployed_with_its_rights_and_removed_when_disabled(
    kube_admin: KubeClient,
    kube_namespace: str,
    chart_access: ServiceAccountAccess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = kube_namespace
    monkeypatch.setenv("PAGED_ROUTER_CLUSTER_ROLE", ROUTER_ROLE)  # as the chart sets it on the operator
    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path).start()
    try:
        router = {"enabled": True, "policy": "prefix", "replicas": 2}
        owner = kube_admin.create(md_path(ns), model_deployment("gemma", router=router, service={"type": "NodePort"}))
        paths = router_paths(ns)
        wait_for("the router's children", lambda: all(kube_admin.exists(p) for p in paths.values()), 60)
        for kind, path in paths.items():
            (ref,) = kube_admin.get(path)["metadata"]["ownerReferences"]
            assert ref["uid"] == owner["metadata"]["uid"], kind
        binding = kube_admin.get(paths["RoleBinding"])
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": ROUTER_ROLE}  # fmt: skip
        deployment = kube_admin.get(paths["Deployment"])
        assert deployment["spec"]["replicas"] == 2
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--service") + 1] == "gemma" and args[args.index("--policy") + 1] == "prefix"
        assert args[args.index("--queue-timeout") + 1] == "600" and "--served-model" in args
        engines_service = f"/api/v1/namespaces/{ns}/services/gemma"
        # Clients reach the router by the spec's Service type; the engines stay in-cluster behind it.
        assert kube_admin.get(paths["Service"])["spec"]["type"] == "NodePort"
        assert kube_admin.get(engines_service)["spec"]["type"] == "ClusterIP"
        assert kube_admin.get(paths["PodDisruptionBudget"])["spec"]["maxUnavailable"] == 1
        endpoint = f"http://gemma-router.{ns}.svc:8000/v1"
        wait_for("status endpoint", lambda: kube_admin.get(md_path(ns, "gemma")).get("status", {}).get("endpoint")
                 == endpoint, 60)  # fmt: skip
        # The router's account may read EndpointSlices here (through the binding), and nothing else.
        assert can(kube_admin, ns, {"verb": "watch", "group": "discovery.k8s.io", "resource": "endpointslices"})
        assert not can(kube_admin, ns, {"verb": "list", "resource": "pods"})

        kube_admin.patch(md_path(ns, "gemma"), {"spec": {"router": {"enabled": False}}})
        wait_for("the router's children deleted", lambda: not any(kube_admin.exists(p) for p in paths.values()), 60)
        assert kube_admin.exists(f"/apis/apps/v1/namespaces/{ns}/deployments/gemma")  # the engines stay
        wait_for("the engines' Service facing clients", lambda: kube_admin.get(engines_service)["spec"]["type"]
                 == "NodePort", 60)  # fmt: skip
        kube_admin.patch(md_path(ns, "gemma"), {"spec": {"router": {"enabled": True}}})
        wait_for("the engines' Service back in-cluster", lambda: kube_admin.get(engines_service)["spec"]["type"]
                 == "ClusterIP", 60)  # fmt: skip
    finally:
        operator.stop()
