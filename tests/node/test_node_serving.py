"""The product as a cluster runs it: the chart's operator and the engine images under a real kubelet, with the
kubelet's own probes, a real Service routed by kube-proxy, and the kubelet restarting a killed engine."""

from __future__ import annotations

import ipaddress
import os
import signal

import pytest
import yaml

from e2e.cluster.client import has_condition, wait_for
from tests.node.conftest import MD_NAME, Deployed

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.slow, pytest.mark.gemma]

OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"


@pytest.fixture(scope="module")
def ready(deployed: Deployed) -> Deployed:
    deployed.wait_ready(1)
    return deployed


def fresh_engine(deployed: Deployed) -> dict:
    """The engine pod as the kubelet first started it. A test that killed the engine (the restart test below) leaves
    a restarted container behind; then the pod is replaced, so this test starts from the same state in any order."""
    (pod,) = deployed.wait_ready(1)
    if pod["status"]["containerStatuses"][0]["restartCount"] == 0:
        return pod
    deployed.kubectl("-n", deployed.namespace, "delete", "pod", pod["metadata"]["name"], "--wait=true", timeout=300)
    (pod,) = deployed.wait_ready(1)
    return pod


def test_engine_pod_is_ready_through_the_kubelets_probes(ready: Deployed):
    pod = fresh_engine(ready)
    node = ready.node
    assert pod["spec"]["nodeName"] == node.name
    assert pod["status"]["hostIP"] == node.ip
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(node.network.addrs.pod_cidr)
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] and status["started"] and status["restartCount"] == 0
    assert status["imageID"], "the kubelet reports the image it ran"
    md_path = f"/apis/paged.dev/v1alpha1/namespaces/{ready.namespace}/modeldeployments/{MD_NAME}"
    wait_for("ModelDeployment Ready", lambda: has_condition(ready.admin.get(md_path), "Ready"), timeout_s=120)


def test_completion_through_the_services_cluster_ip(ready: Deployed):
    completion = ready.complete()
    assert completion["model"] == "tiny"
    assert completion["usage"]["completion_tokens"] == 4


def test_pods_resolve_service_names_through_cluster_dns(ready: Deployed):
    """``kubectl exec`` (API server -> kubelet -> containerd) into the engine, which resolves its Service's short
    name through the pod's search path and CoreDNS."""
    (pod,) = ready.ready_engine_pods()
    cluster_ip = ready.admin.get(f"/api/v1/namespaces/{ready.namespace}/services/{MD_NAME}")["spec"]["clusterIP"]
    code = f"import socket; print(socket.gethostbyname({MD_NAME!r}))"
    out = ready.kubectl(
        "-n", ready.namespace, "exec", pod["metadata"]["name"], "-c", "engine", "--", "python", "-c", code
    )
    assert out.strip() == cluster_ip


def test_killed_engine_is_restarted_by_the_kubelet_and_becomes_ready(ready: Deployed):
    (pod,) = ready.ready_engine_pods()
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]  # another test may have restarted it before
    container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    pid = int(ready.node.ctr("tasks", "ls").split(container_id, 1)[1].split()[0])
    os.kill(pid, signal.SIGKILL)

    def restarted() -> dict | None:
        pods = ready.ready_engine_pods()
        statuses = [p["status"]["containerStatuses"][0] for p in pods]
        return pods[0] if len(pods) == 1 and statuses[0]["restartCount"] > restarts else None

    again = wait_for("the engine restarted by the kubelet and Ready", restarted, timeout_s=180, interval_s=1)
    assert again["metadata"]["uid"] == pod["metadata"]["uid"], "the kubelet restarts the container in place"
    assert again["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert ready.complete()["usage"]["completion_tokens"] == 4


def _owned_by(objects: list[dict], uid: str) -> list[str]:
    owned = [o for o in objects if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))]
    return [o["metadata"]["name"] for o in owned]


def test_operator_pod_deleted_mid_reconcile_converges_without_duplicates(ready: Deployed):
    """A spec change applied with kubectl, and the operator's pod deleted at once: its Deployment's next pod picks
    the change up, and the ModelDeployment ends with one of each child, rolled out to the new spec."""
    ns, kubectl = ready.namespace, ready.kubectl
    md_path = f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments/{MD_NAME}"
    operator_pods = ready.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=OPERATOR_SELECTOR)
    (old_operator,) = [p["metadata"]["name"] for p in operator_pods["items"]]
    manifest = yaml.safe_load(ready.manifest.read_text())
    manifest["spec"]["engine"]["maxModelLen"] = 512
    ready.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False))
    kubectl("apply", "-f", str(ready.manifest))
    generation = ready.admin.get(md_path)["metadata"]["generation"]
    kubectl("-n", ns, "delete", "pod", old_operator, "--wait=false")

    def converged() -> bool:
        md = ready.admin.get(md_path)
        status = md.get("status") or {}
        pods = ready.engine_pods()
        return (
            status.get("observedGeneration") == generation
            and has_condition(md, "Ready")
            and len(pods) == 1
            and has_condition(pods[0], "Ready")
            and "512" in pods[0]["spec"]["containers"][0]["args"]
        )

    try:
        wait_for("the new operator to roll the engines out to the new spec", converged, timeout_s=300, interval_s=1)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{ready.describe()}") from None

    def ready_operators() -> list[str]:
        operators = ready.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=OPERATOR_SELECTOR)
        return [p["metadata"]["name"] for p in operators["items"] if has_condition(p, "Ready")]

    # The new operator may reconcile before the kubelet's next readiness probe marks its pod Ready.
    wait_for("the new operator pod to be Ready", lambda: len(ready_operators()) == 1, timeout_s=60, interval_s=1)
    assert ready_operators() != [old_operator]
    uid = ready.admin.get(md_path)["metadata"]["uid"]
    core = "/api/v1"
    children = [("Deployment", "/apis/apps/v1"), ("Service", core), ("ConfigMap", core), ("Secret", core)]
    for kind, path in children:
        items = ready.admin.get(f"{path}/namespaces/{ns}/{kind.lower()}s")["items"]
        assert len(_owned_by(items, uid)) == 1, f"{kind}s owned by the ModelDeployment: {_owned_by(items, uid)}"
    assert ready.complete()["usage"]["completion_tokens"] == 4
