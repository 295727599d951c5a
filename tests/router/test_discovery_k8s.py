"""EndpointSlice discovery against the real API server: ``watch_endpoint_slices`` lists and watches a Service's
slices and reports the endpoints that join, turn not ready, start terminating or leave.

Pods on the test bed's kwok nodes have loopback IPs, which EndpointSlice validation refuses (docs/testbed.md),
so the slices are written by the test, as the endpointslice controller would, with private addresses. The watch
runs in the test process and nothing connects to those addresses (no traffic leaves the machine); how the pool
follows a change of endpoints is tested with static endpoints (``test_proxy.py``), through the same method.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from paged_platform.kube import KubeTarget, connect
from paged_platform.router.discovery import watch_endpoint_slices

from e2e.cluster.client import KubeClient
from e2e.cluster.controlplane import ControlPlane

pytestmark = pytest.mark.k8s
SERVICE = "engines"


def endpoint_slice(name: str, ips: dict[str, dict[str, bool]], service: str = SERVICE) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": conditions} for ip, conditions in ips.items()],
    }


READY = {"ready": True, "serving": True, "terminating": False}
NOT_READY = {"ready": False, "serving": False, "terminating": False}
TERMINATING = {"ready": False, "serving": True, "terminating": True}


async def test_the_watch_follows_the_services_endpoint_slices(
    kube_admin: KubeClient, kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{kube_namespace}/endpointslices"
    seen: list[set[str]] = []
    changed = asyncio.Event()

    def on_change(urls: set[str]) -> None:
        seen.append(urls)
        changed.set()

    async def until(expected: set[str]) -> None:
        async with asyncio.timeout(30):
            while not seen or seen[-1] != expected:
                changed.clear()
                await changed.wait()

    def kube(method: str, *args: Any) -> Any:
        return asyncio.to_thread(getattr(kube_admin, method), *args)

    await kube("create", slices, endpoint_slice("engines-a", {"10.9.0.1": READY, "10.9.0.2": NOT_READY}))
    await kube("create", slices, endpoint_slice("other", {"10.9.9.9": READY}, service="another-service"))
    target = KubeTarget(kubeconfig=str(kube_cluster.admin_kubeconfig), namespace=kube_namespace)
    async with connect(target) as api:
        task = asyncio.create_task(watch_endpoint_slices(api.api, kube_namespace, SERVICE, "http", on_change))
        try:
            await until({"http://10.9.0.1:8000"})  # listed: only the ready endpoint, only this Service's slices

            await kube("create", slices, endpoint_slice("engines-b", {"10.9.1.1": READY}))
            await until({"http://10.9.0.1:8000", "http://10.9.1.1:8000"})  # a slice added

            current = await kube("get", f"{slices}/engines-a")
            wanted = endpoint_slice("engines-a", {"10.9.0.1": TERMINATING, "10.9.0.2": READY})
            await kube("replace", f"{slices}/engines-a", {**current, "endpoints": wanted["endpoints"]})
            await until({"http://10.9.0.2:8000", "http://10.9.1.1:8000"})  # one terminating, one now ready

            await kube("delete", f"{slices}/engines-b")
            await until({"http://10.9.0.2:8000"})  # a slice deleted
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
