"""EndpointSlice discovery against the real API server: the router lists and watches a Service's slices and
follows endpoints that join, turn not ready, start terminating or leave.

Pods on the test bed's kwok nodes have loopback IPs, which EndpointSlice validation refuses (docs/testbed.md),
so the slices are written by the test, as a controller would: ``addressType: FQDN`` with ``localhost`` and each
fake replica's own port, which keeps every probe on this machine.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from e2e.cluster.client import KubeClient
from e2e.cluster.controlplane import ControlPlane
from tests.router.conftest import Proc, replica_states, start_router, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.server]
SERVICE = "engines"


def endpoint_slice(name: str, port: int, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": SERVICE}},
        "addressType": "FQDN",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["localhost"], "conditions": {"ready": ready, "terminating": terminating}}],
    }


def urls(router: Proc) -> set[str]:
    return set(replica_states(router))


def test_endpoints_follow_the_services_endpoint_slices(
    kube_admin: KubeClient, kube_cluster: ControlPlane, kube_namespace: str, fakes, procs, tmp_path
) -> None:
    a, b = fakes(2)
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{kube_namespace}/endpointslices"
    kube_admin.create(slices, endpoint_slice("engines-a", a.port))
    kube_admin.create(slices, {**endpoint_slice("other", b.port), "metadata": {"name": "other",
                      "labels": {"kubernetes.io/service-name": "another-service"}}})  # fmt: skip
    router = start_router(
        tmp_path, [], "--service", SERVICE, "--namespace", kube_namespace,
        "--kubeconfig", str(kube_cluster.admin_kubeconfig),
    )  # fmt: skip
    procs.append(router)
    url_a, url_b = f"http://localhost:{a.port}", f"http://localhost:{b.port}"
    wait_until(lambda: urls(router) == {url_a})  # the other Service's slice is not ours
    wait_until(lambda: replica_states(router)[url_a]["ready"])
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 1}
    assert httpx.post(f"{router.url}/v1/completions", json=body, timeout=30).status_code == 200

    # b joins not ready, then a starts terminating: once the router has seen the second change, it has seen the
    # first, so an empty set shows both conditions honoured.
    kube_admin.create(slices, endpoint_slice("engines-b", b.port, ready=False))
    set_endpoints(kube_admin, f"{slices}/engines-a", endpoint_slice("engines-a", a.port, terminating=True))
    wait_until(lambda: urls(router) == set())

    set_endpoints(kube_admin, f"{slices}/engines-b", endpoint_slice("engines-b", b.port))
    wait_until(lambda: urls(router) == {url_b})
    wait_until(lambda: replica_states(router)[url_b]["ready"])
    assert httpx.post(f"{router.url}/v1/completions", json=body, timeout=30).json()["choices"][0]["text"] == "b"

    kube_admin.delete(f"{slices}/engines-b")
    wait_until(lambda: urls(router) == set())


def set_endpoints(client: KubeClient, path: str, wanted: dict[str, Any]) -> None:
    client.replace(path, {**client.get(path), "endpoints": wanted["endpoints"]})
