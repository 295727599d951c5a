"""RBAC is enforced: a ServiceAccount kubeconfig can do what its rules grant and nothing else, whether the rules
come from a test or from a Helm chart's own RBAC templates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client, config

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import ApiError, KubeClient

pytestmark = pytest.mark.k8s

CHART = Path(__file__).parent / "data" / "chart"


def forbidden(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        return exc.code == 403
    return False


def test_service_account_has_exactly_its_rules(
    kube_service_account: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> None:
    access = kube_service_account(
        "reader",
        rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        cluster_rules=[{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}],
    )
    with access.client() as kube:
        assert kube.get(f"/api/v1/namespaces/{kube_namespace}/configmaps")["kind"] == "ConfigMapList"
        assert kube.get(f"/api/v1/namespaces/{kube_namespace}")["metadata"]["name"] == kube_namespace
        assert forbidden(kube, f"/api/v1/namespaces/{kube_namespace}/secrets")
        assert forbidden(kube, "/api/v1/namespaces/default/configmaps")  # a Role does not reach other namespaces
        with pytest.raises(ApiError) as denied:
            kube.create(
                f"/api/v1/namespaces/{kube_namespace}/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            )
        assert denied.value.code == 403 and f"system:serviceaccount:{kube_namespace}:reader" in denied.value.message


def test_service_account_kubeconfig_is_self_contained(
    kube_service_account: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> None:
    access = kube_service_account("kc", rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    config = yaml.safe_load(access.kubeconfig.read_text())
    (context,) = config["contexts"]
    assert context["context"]["namespace"] == kube_namespace
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert access.kubeconfig.stat().st_mode & 0o077 == 0  # it holds a token


def test_chart_rbac_grants_its_service_account_what_the_chart_says(
    kube_chart_access: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> None:
    access = kube_chart_access(CHART, "smoke-reader")
    with access.client() as kube:
        assert kube.get(f"/api/v1/namespaces/{kube_namespace}/configmaps")["kind"] == "ConfigMapList"
        assert kube.get("/api/v1/nodes")["items"]  # the chart's ClusterRole
        # The gap the chart leaves (readSecrets=false) shows up as a 403, as it would for the real component.
        assert forbidden(kube, f"/api/v1/namespaces/{kube_namespace}/secrets")


def test_chart_values_change_the_granted_rbac(
    kube_chart_access: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> None:
    access = kube_chart_access(CHART, "smoke-reader", set_values={"readSecrets": "true"})
    with access.client() as kube:
        assert kube.get(f"/api/v1/namespaces/{kube_namespace}/secrets")["kind"] == "SecretList"


async def test_the_operators_client_library_uses_the_kubeconfig(
    kube_chart_access: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> None:
    """kubernetes_asyncio (what the operator uses) loads the kubeconfig: CA, token and default namespace."""
    access = kube_chart_access(CHART, "smoke-reader")
    api_client = await config.new_client_from_config(config_file=str(access.kubeconfig))
    async with api_client:
        core = client.CoreV1Api(api_client)
        configmaps = await core.list_namespaced_config_map(kube_namespace)
        assert "kube-root-ca.crt" in {cm.metadata.name for cm in configmaps.items}
        with pytest.raises(client.ApiException) as denied:
            await core.list_namespaced_secret(kube_namespace)
        assert denied.value.status == 403
