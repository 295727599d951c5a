"""The engine pods the operator renders, for every model source and with every pass-through field, are accepted
by the real API server, and admitted by its Pod Security admission in a namespace that enforces the
``restricted`` standard (the control: a pod without those settings is refused there)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_platform.api import ModelDeployment

from e2e.cluster.binaries import Binaries
from e2e.cluster.client import ApiError, KubeClient, wait_for
from e2e.cluster.helm import render_chart
from tests.operator_k8s.conftest import CHART
from tests.platform.conftest import MODEL_SOURCES

pytestmark = pytest.mark.k8s

UID = "7f1c8d2e-0000-4000-8000-000000000001"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
EVERY_POD_FIELD: dict[str, Any] = {
    "annotations": {"example.com/owner": "ml"},
    "labels": {"team": "ml"},
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    "envFrom": [{"configMapRef": {"name": "engine-env", "optional": True}}],
    "imagePullSecrets": [{"name": "regcred"}],
    "serviceAccountName": "default",
    "priorityClassName": "system-cluster-critical",
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "volumes": [{"name": "templates", "configMap": {"name": "templates", "optional": True}}],
    "volumeMounts": [{"name": "templates", "mountPath": "/templates", "readOnly": True}],
    "shmSize": "256Mi",
}  # fmt: skip
SPECS = [
    pytest.param({}, id="default"),
    *(pytest.param({"model": m}, id=next(iter(m))) for m in MODEL_SOURCES),
    pytest.param({"model": {"name": "Qwen/Qwen2.5-0.5B", "volume": {"claimName": "c"}}}, id="older-hub"),
    pytest.param({"model": {"name": "/models/x", "volume": {"claimName": "w"}}}, id="older-path"),
    pytest.param({"model": {"huggingFace": {"id": "a/b", "tokenSecretRef": {"name": "hf", "key": "t"}}},
                  "pod": EVERY_POD_FIELD, "auth": {"apiKeySecretRef": {"name": "key", "key": "k"}},
                  "resources": {"gpus": 1}}, id="every-field"),
    pytest.param({"adapters": [{"name": "sql", "source": {"huggingFace": {"id": "acme/sql-lora"}}},
                               {"name": "chat", "source": {"path": {"claimName": "loras", "path": "chat"}}},
                               {"name": "legal", "source": {"image": {"reference": "r.local/legal:1"}}},
                               {"name": "med", "source": {"s3": {"uri": "s3://loras/med/"}}}]}, id="adapters"),
]  # fmt: skip


@pytest.fixture(scope="module")
def restricted_namespace(kube_admin: KubeClient) -> Iterator[str]:
    name = f"restricted-{secrets.token_hex(3)}"
    kube_admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": name, "labels": RESTRICTED}})  # fmt: skip
    wait_for(f"ServiceAccount {name}/default",
             lambda: kube_admin.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout_s=30)  # fmt: skip
    yield name
    kube_admin.delete(f"/api/v1/namespaces/{name}")


def model_deployment(namespace: str, spec: dict[str, Any]) -> ModelDeployment:
    name = f"m{secrets.token_hex(3)}"
    return ModelDeployment.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": spec})


def pod_from(deployment: dict[str, Any]) -> dict[str, Any]:
    template = deployment["spec"]["template"]
    meta = {"name": deployment["metadata"]["name"], **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


@pytest.mark.parametrize("spec", SPECS)
def test_engine_pod_is_admitted_under_restricted(
    kube_admin: KubeClient, restricted_namespace: str, spec: dict[str, Any]
) -> None:
    md = model_deployment(restricted_namespace, spec)
    deployment = children.deployment(md, UID)
    deployment["metadata"].pop("ownerReferences")  # no owner object in this test: the server would collect it
    ns = restricted_namespace
    created = kube_admin.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    rendered, stored = deployment["spec"]["template"]["spec"], created["spec"]["template"]["spec"]
    assert [v["name"] for v in stored["volumes"]] == [v["name"] for v in rendered["volumes"]]
    init_args = [c["args"] for c in stored.get("initContainers", [])]
    assert init_args == [c["args"] for c in rendered.get("initContainers", [])]
    pod = kube_admin.create(f"/api/v1/namespaces/{ns}/pods", pod_from(deployment))
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    kube_admin.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")


def test_router_and_chart_pods_are_admitted_under_restricted(
    kube_admin: KubeClient, restricted_namespace: str, kube_binaries: Binaries
) -> None:
    """The router's pods and the chart's own (the operator's) follow the same defaults."""
    ns = restricted_namespace
    md = model_deployment(ns, {"router": {"enabled": True}})
    (router,) = [o for o in router_children.router_children(md, UID, "r") if o["kind"] == "Deployment"]
    (operator,) = [o for o in render_chart(kube_binaries.helm, CHART, "test", ns) if o["kind"] == "Deployment"]
    for deployment in (router, operator):
        pod = pod_from(deployment)
        pod["spec"]["serviceAccountName"] = "default"  # their own accounts are not made here; admission is the point
        pod = kube_admin.create(f"/api/v1/namespaces/{ns}/pods", pod)
        kube_admin.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")


def test_a_pod_without_the_defaults_is_refused_there(kube_admin: KubeClient, restricted_namespace: str) -> None:
    """The control: the namespace really enforces ``restricted``, so the test above can fail."""
    deployment = children.deployment(model_deployment(restricted_namespace, {}), UID)
    pod = pod_from(deployment)
    for container in pod["spec"]["containers"]:
        container.pop("securityContext")
    with pytest.raises(ApiError) as info:
        kube_admin.create(f"/api/v1/namespaces/{restricted_namespace}/pods", pod)
    assert info.value.code == 403 and 'violates PodSecurity "restricted:latest"' in info.value.message
