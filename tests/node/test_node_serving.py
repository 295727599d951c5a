"""The product as a cluster runs it: the chart's operator and the engine images under a real kubelet, with the
kubelet's own probes, a real Service routed by kube-proxy, and the kubelet restarting a killed engine."""

from __future__ import annotations

import ipaddress
import os
import signal

import pytest

from e2e.cluster.client import has_condition, wait_for
from tests.node.conftest import MD_NAME, Deployed

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.slow]


@pytest.fixture(scope="module")
def ready(deployed: Deployed) -> Deployed:
    deployed.wait_ready(1)
    return deployed


def test_engine_pod_is_ready_through_the_kubelets_probes(ready: Deployed):
    (pod,) = ready.ready_engine_pods()
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


def test_killed_engine_is_restarted_by_the_kubelet_and_becomes_ready(ready: Deployed):
    (pod,) = ready.ready_engine_pods()
    container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    pid = int(ready.node.ctr("tasks", "ls").split(container_id, 1)[1].split()[0])
    os.kill(pid, signal.SIGKILL)

    def restarted() -> dict | None:
        pods = ready.ready_engine_pods()
        statuses = [p["status"]["containerStatuses"][0] for p in pods]
        return pods[0] if len(pods) == 1 and statuses[0]["restartCount"] >= 1 else None

    again = wait_for("the engine restarted by the kubelet and Ready", restarted, timeout_s=180, interval_s=1)
    assert again["metadata"]["uid"] == pod["metadata"]["uid"], "the kubelet restarts the container in place"
    assert again["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert ready.complete()["usage"]["completion_tokens"] == 4
