"""Controllers, scheduler and kwok are real: a Deployment becomes a ReplicaSet and Ready pods on fake nodes, the
pods get loopback IPs a test can serve on, and deleting an owner garbage-collects its dependents."""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

import pytest

from e2e.cluster.client import KubeClient, has_condition, wait_for
from e2e.cluster.controlplane import NODE_IP, ControlPlane

pytestmark = pytest.mark.k8s

LABELS = {"app": "engine"}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                # kwok runs no containers: the image is never pulled.
                "spec": {"containers": [{"name": "engine", "image": "paged-engine:test"}]},
            },
        },
    }


def ready_pods(client: KubeClient, namespace: str, want: int) -> list[dict[str, Any]] | None:
    pods = client.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=engine")["items"]
    ready = [p for p in pods if p["status"].get("phase") == "Running" and has_condition(p, "Ready")]
    return ready if len(ready) == want else None


def test_deployment_pods_become_ready_on_kwok_nodes_with_loopback_ips(
    kube_admin: KubeClient, kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    apps = f"/apis/apps/v1/namespaces/{kube_namespace}/deployments"
    kube_admin.create(apps, deployment("engine", replicas=3))
    pods = wait_for("3 Ready engine pods", lambda: ready_pods(kube_admin, kube_namespace, 3), timeout_s=60)

    assert {p["spec"]["nodeName"] for p in pods} <= set(kube_cluster.node_names)
    ips = [ipaddress.ip_address(p["status"]["podIP"]) for p in pods]
    assert all(ip.is_loopback for ip in ips) and len(set(ips)) == 3
    assert {p["status"]["hostIP"] for p in pods} == {NODE_IP}

    def deployment_status() -> dict[str, Any] | None:
        status = kube_admin.get(f"{apps}/engine")["status"]
        return status if status.get("readyReplicas") == 3 else None

    assert wait_for("Deployment readyReplicas=3", deployment_status, timeout_s=30)["availableReplicas"] == 3


def test_a_process_serving_on_a_pod_ip_is_reachable_there(kube_admin: KubeClient, kube_namespace: str) -> None:
    """What e2e tests do with engine pods: start the engine on the pod's IP, reach it at that IP."""
    kube_admin.create(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments", deployment("engine", replicas=1))
    (pod,) = wait_for("1 Ready engine pod", lambda: ready_pods(kube_admin, kube_namespace, 1), timeout_s=60)
    pod_ip = pod["status"]["podIP"]

    with socket.create_server((pod_ip, 0)) as server:
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"pong from " + pod_ip.encode())

        responder = threading.Thread(target=answer, daemon=True)
        responder.start()
        with socket.create_connection((pod_ip, port), timeout=5) as client:
            assert client.recv(64) == f"pong from {pod_ip}".encode()
        responder.join(timeout=5)


def test_deleting_a_deployment_collects_its_replicaset_and_pods(kube_admin: KubeClient, kube_namespace: str) -> None:
    apps = f"/apis/apps/v1/namespaces/{kube_namespace}"
    owner = kube_admin.create(f"{apps}/deployments", deployment("engine", replicas=2))
    wait_for("2 Ready engine pods", lambda: ready_pods(kube_admin, kube_namespace, 2), timeout_s=60)
    (rs,) = kube_admin.get(f"{apps}/replicasets")["items"]
    assert rs["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]

    kube_admin.delete(f"{apps}/deployments/engine", propagation="Background")
    wait_for("ReplicaSets collected", lambda: not kube_admin.get(f"{apps}/replicasets")["items"], timeout_s=60)
    wait_for(
        "pods collected",
        lambda: not kube_admin.get(f"/api/v1/namespaces/{kube_namespace}/pods")["items"],
        timeout_s=60,
    )


def test_objects_owned_by_a_configmap_are_collected_with_it(kube_admin: KubeClient, kube_namespace: str) -> None:
    """The pattern the operator uses: children carry an ownerReference to the object they were made for."""
    core = f"/api/v1/namespaces/{kube_namespace}"
    owner = kube_admin.create(
        f"{core}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    for i in range(2):
        kube_admin.create(
            f"{core}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"child-{i}", "ownerReferences": [ref]}},
        )
    kube_admin.create(
        f"{core}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"}}
    )

    kube_admin.delete(f"{core}/configmaps/owner")
    wait_for(
        "children collected",
        lambda: not any(kube_admin.exists(f"{core}/configmaps/child-{i}") for i in range(2)),
        timeout_s=60,
    )
    assert kube_admin.exists(f"{core}/configmaps/bystander")


def test_services_get_no_endpoints_for_loopback_pod_ips(kube_admin: KubeClient, kube_namespace: str) -> None:
    """The known limit of loopback pod IPs (docs/testbed.md): EndpointSlice validation refuses 127.0.0.0/8, so a
    Service selecting these pods has no endpoints and e2e tests address pods by their IPs. Should a release lift the
    restriction, this test fails and the docs need updating."""
    core = f"/api/v1/namespaces/{kube_namespace}"
    kube_admin.create(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments", deployment("engine", replicas=1))
    wait_for("1 Ready engine pod", lambda: ready_pods(kube_admin, kube_namespace, 1), timeout_s=60)
    kube_admin.create(
        f"{core}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "engine"},
            "spec": {"selector": LABELS, "ports": [{"port": 8000}]},
        },
    )

    def refusal() -> str | None:
        events = kube_admin.get(f"{core}/events", fieldSelector="involvedObject.kind=Service")["items"]
        return next((e["message"] for e in events if e["reason"] == "FailedToUpdateEndpointSlices"), None)

    assert "may not be in the loopback range" in wait_for("EndpointSlice refusal event", refusal, timeout_s=30)
    slices = kube_admin.get(f"/apis/discovery.k8s.io/v1/namespaces/{kube_namespace}/endpointslices")["items"]
    assert not any(s.get("endpoints") for s in slices)
