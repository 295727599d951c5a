"""The Helm chart, rendered and linted by the real helm, checked by a real API server: manifests valid,
values schema enforced, and the operator's RBAC exactly as narrow as documented."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from paged_operator.cli import build_parser, render_settings
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.render.settings import NAMESPACE_NAME_LABEL, Images, Peer, RenderSettings
from paged_platform.api import ModelDeployment
from paged_platform.api.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE
from paged_platform.crd import crd

from conftest import CHART
from e2e.cluster.client import KubeClient
from e2e.cluster.helm import render_chart

pytestmark = pytest.mark.k8s

RBAC = "/apis/rbac.authorization.k8s.io/v1"
COLLECTIONS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "Role": (RBAC, "roles", True),
    "RoleBinding": (RBAC, "rolebindings", True),
    "ClusterRole": (RBAC, "clusterroles", False),
    "ClusterRoleBinding": (RBAC, "clusterrolebindings", False),
}


def helm(binaries: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.helm), *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "sets", [[], ["--set", "watchNamespace=team-a"], ["--set", "serviceMonitor.enabled=true"]], ids=str
)
def test_lint_strict(kube_binaries: Any, sets: list[str]) -> None:
    result = helm(kube_binaries, "lint", "--strict", str(CHART), *sets)
    assert result.returncode == 0, result.stdout + result.stderr


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_default_render(kube_binaries: Any) -> None:
    objects = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "paged-system"))
    assert set(objects) == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",  # the leader-election Lease
        "RoleBinding",
        "Service",
        "Deployment",
    }  # no Secret: the operator creates its token key once, so every render is the same
    assert objects["CustomResourceDefinition"] == [crd()]
    (deployment,) = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--standalone" in container["args"] and "--all-namespaces" in container["args"]
    assert {"--leader-election", "--lease-name=rel-paged"} <= set(container["args"])
    assert {"POD_NAME", "POD_NAMESPACE"} <= {e["name"] for e in container["env"]}
    roles = {r["metadata"]["name"]: r for r in objects["Role"]}
    assert set(roles) == {"rel-paged-leader-election", "rel-paged-token-key"}
    assert roles["rel-paged-token-key"]["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    role = roles["rel-paged-leader-election"]
    assert role["metadata"]["namespace"] == "paged-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["rel-paged"],
         "verbs": ["get", "update"]},
    ]  # fmt: skip
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"] for p in container["ports"]} == {"health", "metrics"}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "rel-paged"
    # the admin tokens' key: created by the operator, mounted for it once it exists
    assert {"--token-key-file=/etc/paged-operator/token-key/key", "--token-key-secret=rel-paged-token-key"} <= set(
        container["args"]
    )
    mount = next(m for m in container["volumeMounts"] if m["name"] == "token-key")
    assert mount["mountPath"] == "/etc/paged-operator/token-key" and mount["readOnly"]
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "token-key")
    assert volume["secret"]["secretName"] == "rel-paged-token-key" and volume["secret"]["optional"] is True
    assert not any(a.startswith("--prometheus-url") for a in container["args"])  # the pods are scraped
    # The images an unset spec means are the release's own, as the operator's defaults name them.
    assert {f"--engine-image={DEFAULT_ENGINE_IMAGE}", f"--router-image={DEFAULT_ROUTER_IMAGE}"} <= set(
        container["args"]
    )
    assert container["image"] == DEFAULT_ROUTER_IMAGE  # paged-router ships in the operator image


def operator_settings(deployment: dict[str, Any]) -> RenderSettings:
    """The RenderSettings the operator builds from the args the chart gives it, in its release namespace."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return render_settings(build_parser().parse_args(container["args"]), deployment["metadata"]["namespace"])


def test_the_image_values_become_the_images_an_unset_spec_means(kube_binaries: Any) -> None:
    """A mirror registry needs only the repositories: the tags follow the chart's appVersion, and the routers follow
    the operator's own image unless images.router names another."""
    mirror = {"images.engine.repository": "mirror.local:5000/paged/paged-engine",
              "image.repository": "mirror.local:5000/paged/paged-operator"}  # fmt: skip
    (deployment,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values=mirror))["Deployment"]
    tag = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert operator_settings(deployment).images == Images(
        engine=f"mirror.local:5000/paged/paged-engine:{tag}", router=f"mirror.local:5000/paged/paged-operator:{tag}"
    )
    pinned = {
        "images.engine.tag": "0.2.0-cuda",
        "images.router.repository": "r.local/router",
        "images.router.tag": "v9",
    }
    (deployment,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values=pinned))["Deployment"]
    assert operator_settings(deployment).images == Images(
        engine="ghcr.io/paged/paged-engine:0.2.0-cuda", router="r.local/router:v9"
    )


def test_a_network_policy_admits_the_charts_operator_pods_and_the_configured_prometheus(
    kube_binaries: Any, tmp_path: Path
) -> None:
    (deployment,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "paged-system"))["Deployment"]
    peers = operator_settings(deployment).peers
    assert peers.operator is not None
    assert peers.operator.namespace_labels == {NAMESPACE_NAME_LABEL: "paged-system"}  # the release namespace
    assert peers.operator.pod_labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert peers.prometheus == Peer({}, {"app.kubernetes.io/name": "prometheus"})  # in any namespace
    values = tmp_path / "values.yaml"
    labels = {"namespaceLabels": [f"{NAMESPACE_NAME_LABEL}=monitoring"], "podLabels": ["app=kube-prometheus"]}
    values.write_text(yaml.safe_dump({"networkPolicy": {"prometheus": labels}}))
    (deployment,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", values_files=[values]))["Deployment"]
    assert operator_settings(deployment).peers.prometheus == Peer(
        {NAMESPACE_NAME_LABEL: "monitoring"}, {"app": "kube-prometheus"}
    )  # the list replaces the default label (a map would have been merged into it, matching no pod)
    none = {"networkPolicy.prometheus.podLabels": "null"}
    (deployment,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values=none))["Deployment"]
    assert operator_settings(deployment).peers.prometheus is None  # no labels: no rule, never one for everyone


def test_two_renders_are_the_same_so_gitops_keeps_the_token_key(kube_binaries: Any) -> None:
    """helm template (Argo CD, Flux) renders without the cluster: nothing random may be in it, or every sync would
    replace the key and the engines' admin tokens would stop matching."""
    first = helm(kube_binaries, "template", "rel", str(CHART), "--namespace", "ns")
    second = helm(kube_binaries, "template", "rel", str(CHART), "--namespace", "ns")
    assert first.returncode == 0 and first.stdout == second.stdout


def test_a_provided_token_key_is_mounted_and_nothing_is_created(kube_binaries: Any) -> None:
    objects = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values={"tokenKey.existingSecret": "k"}))
    (deployment,) = objects["Deployment"]
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "token-key")
    assert volume["secret"] == {"secretName": "k", "defaultMode": 0o400}
    assert not any(
        a.startswith("--token-key-secret") for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert "rel-paged-token-key" not in {r["metadata"]["name"] for r in objects["Role"]}


def test_prometheus_url_makes_the_operator_read_prometheus(kube_binaries: Any) -> None:
    url = "http://prometheus-operated.monitoring:9090"
    objects = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values={"operator.prometheusUrl": url}))
    (container,) = objects["Deployment"][0]["spec"]["template"]["spec"]["containers"]
    assert f"--prometheus-url={url}" in container["args"]


def test_watch_namespace_uses_a_role(kube_binaries: Any) -> None:
    objects = by_kind(
        render_chart(kube_binaries.helm, CHART, "rel", "paged-system", set_values={"watchNamespace": "team-a"})
    )
    (role,) = [r for r in objects["Role"] if r["metadata"]["name"] == "rel-paged"]
    assert role["metadata"]["namespace"] == "team-a"
    cluster_roles = {r["metadata"]["name"]: r["rules"] for r in objects["ClusterRole"]}
    assert cluster_roles["rel-paged"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
        # Binding the routers' ClusterRole in a ModelDeployment's namespace (spec.router), and no other role.
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"],
         "resourceNames": ["rel-paged-router"]},
    ]  # fmt: skip
    assert cluster_roles["rel-paged-router"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}
    ]
    (container,) = objects["Deployment"][0]["spec"]["template"]["spec"]["containers"]
    assert "--namespace=team-a" in container["args"] and "--all-namespaces" not in container["args"]


def test_without_leader_election_one_replica_is_replaced_not_rolled(kube_binaries: Any) -> None:
    values = {"leaderElection.enabled": "false", "operator.replicas": "3"}
    objects = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values=values))
    (deployment,) = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "--leader-election" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [r["metadata"]["name"] for r in objects["Role"]] == ["rel-paged-token-key"]  # no Lease to hold


def test_service_monitor_is_optional(kube_binaries: Any) -> None:
    objects = by_kind(
        render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values={"serviceMonitor.enabled": "true"})
    )
    (monitor,) = objects["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_the_policy_values_become_the_operators_allow_lists(kube_binaries: Any) -> None:
    values = {"policy.allowedServiceAccounts[0]": "ml-runner", "policy.allowedVolumeTypes[0]": "nfs",
              "policy.allowedImages[0]": "registry.example.com/*"}  # fmt: skip
    objects = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values=values))
    (container,) = objects["Deployment"][0]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert "--allowed-service-account=ml-runner" in args and "--allowed-volume-type=nfs" in args
    assert "--allowed-image=registry.example.com/*" in args
    (default,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns"))["Deployment"]
    assert not any(a.startswith("--allowed-") for a in default["spec"]["template"]["spec"]["containers"][0]["args"])


POD_MONITOR_API = "monitoring.coreos.com/v1/PodMonitor"


@pytest.mark.parametrize(
    ("enabled", "served", "rendered"),
    [("auto", False, False), ("auto", True, True), ("true", False, True), ("false", True, False)],
)
def test_the_engine_pod_monitor_follows_the_monitoring_api(
    kube_binaries: Any, enabled: str, served: bool, rendered: bool
) -> None:
    objects = by_kind(
        render_chart(
            kube_binaries.helm,
            CHART,
            "rel",
            "ns",
            set_values={"monitoring.podMonitor.enabled": enabled},
            api_versions=[POD_MONITOR_API] if served else [],
        )
    )
    assert ("PodMonitor" in objects) == rendered


def test_the_engine_pod_monitor_scrapes_what_the_operator_renders(kube_binaries: Any) -> None:
    """Its selector matches the engine and router pods the operator creates, on the port that serves /metrics, and
    their app.kubernetes.io/name becomes the job the rules select (paged-engine, paged-router)."""
    (monitor,) = by_kind(render_chart(kube_binaries.helm, CHART, "rel", "ns", api_versions=[POD_MONITOR_API]))[
        "PodMonitor"
    ]
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"any": True} and spec["jobLabel"] == "app.kubernetes.io/name"
    (endpoint,) = spec["podMetricsEndpoints"]
    md = ModelDeployment.model_validate(
        {"metadata": {"name": "m", "namespace": "team"}, "spec": {"router": {"enabled": True}}}
    )
    engine_pod = children.deployment(md, "u")["spec"]["template"]
    router_pod = router_children.router_deployment(md, "u")["spec"]["template"]
    jobs = set()
    for pod in (engine_pod, router_pod):
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (container,) = pod["spec"]["containers"]
        assert endpoint["port"] in {p["name"] for p in container["ports"]} and endpoint["path"] == "/metrics"
        jobs.add(pod["metadata"]["labels"][spec["jobLabel"]])
    assert jobs == {"paged-engine", "paged-router"}
    scoped = by_kind(
        render_chart(
            kube_binaries.helm,
            CHART,
            "rel",
            "ns",
            set_values={"watchNamespace": "team"},
            api_versions=[POD_MONITOR_API],
        )
    )
    assert scoped["PodMonitor"][0]["spec"]["namespaceSelector"] == {"matchNames": ["team"]}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("watchNamespace", "Not_A_Namespace", "watchNamespace"),
        ("operator.healthPort", "0", "healthPort"),
        ("operator.bogus", "1", "bogus"),
        ("image.pullPolicy", "Sometimes", "pullPolicy"),
        ("operator.prometheusUrl", "prometheus:9090", "prometheusUrl"),
        ("monitoring.podMonitor.enabled", "sometimes", "podMonitor"),
        ("policy.allowedServiceAccounts[0]", "Not_A_Name", "allowedServiceAccounts"),
        ("images.engine.repository", "ghcr.io/paged/paged-engine:0.1.0", "repository"),  # the tag goes in tag
        ("images.router.repository", "registry.local/router:9", "repository"),
    ],
)
def test_values_schema_refuses_bad_values(kube_binaries: Any, key: str, value: str, message: str) -> None:
    result = helm(kube_binaries, "template", "rel", str(CHART), "--set", f"{key}={value}")
    assert result.returncode != 0
    assert message in result.stderr


def test_rendered_manifests_pass_server_validation(
    kube_binaries: Any, kube_admin: KubeClient, kube_namespace: str
) -> None:
    for sets in ({}, {"watchNamespace": kube_namespace}):
        for obj in render_chart(kube_binaries.helm, CHART, "rel", kube_namespace, set_values=sets):
            if obj["kind"] == "CustomResourceDefinition":
                continue
            prefix, plural, namespaced = COLLECTIONS[obj["kind"]]
            ns = obj["metadata"].get("namespace", kube_namespace)
            path = f"{prefix}/namespaces/{ns}/{plural}" if namespaced else f"{prefix}/{plural}"
            kube_admin.request("POST", path, obj, params={"dryRun": "All", "fieldValidation": "Strict"})


def can(
    client: KubeClient, verb: str, resource: str, namespace: str, group: str = "", sub: str = "", name: str = ""
) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": sub,
                "namespace": namespace,
                "name": name,
            }
        },
    }
    return client.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"]["allowed"]


ALLOWED = [
    ("watch", "modeldeployments", "paged.dev", ""),
    ("patch", "modeldeployments", "paged.dev", "status"),
    ("create", "deployments", "apps", ""),
    ("delete", "poddisruptionbudgets", "policy", ""),
    ("watch", "networkpolicies", "networking.k8s.io", ""),  # spec.networkPolicy, watched for drift
    ("delete", "networkpolicies", "networking.k8s.io", ""),
    ("patch", "configmaps", "", ""),
    ("list", "pods", "", ""),
    ("create", "events", "", ""),
    ("create", "secrets", "", ""),  # the per-ModelDeployment engine admin token
    ("create", "serviceaccounts", "", ""),  # the optional router's identity...
    ("create", "rolebindings", "rbac.authorization.k8s.io", ""),  # ...bound to the chart's router ClusterRole
    ("create", "leases", "coordination.k8s.io", ""),  # leader election (kopf's peering stays off: --standalone)
]
DENIED = [
    ("create", "modeldeployments", "paged.dev", ""),  # users create them; the operator only reconciles
    ("delete", "modeldeployments", "paged.dev", ""),
    ("create", "pods", "", ""),  # pods come from the Deployment controller, not the operator
    ("delete", "pods", "", ""),
    ("get", "secrets", "", ""),  # admin tokens are derived from the operator's mounted key: no Secret is read
    ("list", "secrets", "", ""),
    ("watch", "secrets", "", ""),
    ("create", "customresourcedefinitions", "apiextensions.k8s.io", ""),
    ("create", "roles", "rbac.authorization.k8s.io", ""),
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io", ""),
    ("list", "endpointslices", "discovery.k8s.io", ""),  # the router reads them, under its own account
]


@pytest.mark.parametrize("watch_namespace", [False, True], ids=["cluster", "namespaced"])
def test_operator_rbac_is_least_privilege(kube_chart_access: Any, kube_namespace: str, watch_namespace: bool) -> None:
    sets = {"watchNamespace": kube_namespace} if watch_namespace else None
    access = kube_chart_access(CHART, "test-paged", set_values=sets)
    with access.client() as sa:
        for verb, resource, group, sub in ALLOWED:
            assert can(sa, verb, resource, kube_namespace, group, sub), (verb, resource, sub)
        for verb, resource, group, sub in DENIED:
            assert not can(sa, verb, resource, kube_namespace, group, sub), (verb, resource, sub)
        assert can(sa, "watch", "customresourcedefinitions", "", "apiextensions.k8s.io")
        # Namespaced install: nothing outside the watched namespace.
        assert can(sa, "list", "pods", "default") is not watch_namespace
        # The chart's one Lease, in the release namespace, and no other.
        leases = ("leases", kube_namespace, "coordination.k8s.io", "")
        assert can(sa, "update", *leases, name="test-paged") and not can(sa, "update", *leases, name="other")
        assert not can(sa, "list", *leases) and not can(sa, "delete", *leases, name="test-paged")


def test_chart_readme_documents_regeneration() -> None:
    assert "paged-ctl crd > charts/paged/crds/modeldeployments.paged.dev.yaml" in (CHART / "README.md").read_text()


def test_an_existing_service_account_must_be_named(kube_binaries: Any) -> None:
    with pytest.raises(RuntimeError, match=r"serviceAccount\.name is required"):
        render_chart(kube_binaries.helm, CHART, "rel", "ns", set_values={"serviceAccount.create": "false"})
