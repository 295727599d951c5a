"""Where the replicas are: a static list, or the EndpointSlices of the engines' Service, watched.

EndpointSlices (``discovery.k8s.io/v1``, label ``kubernetes.io/service-name``) list each pod address with its
conditions. An endpoint counts only when ``ready`` (nil means ready, as the API documents) and not
``terminating``: the endpoints controller drops readiness when a pod's readiness probe fails (a draining
engine's ``/ready`` is 503) and marks pods being deleted terminating, so the router stops sending there
even before its own probe notices. The port is the slice port named ``port_name`` (the operator names it
``http``), else the slice's only port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("paged_router")

SERVICE_LABEL = "kubernetes.io/service-name"
#: Server-side watch timeout; the watch is then re-opened from the last resource version.
WATCH_TIMEOUT_S = 300
RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)


def _url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def slice_urls(endpoint_slice: dict[str, Any], port_name: str) -> set[str]:
    """The URLs of a slice's ready, non-terminating endpoints (camelCase keys, as the API serves them)."""
    ports = endpoint_slice.get("ports") or []
    named = [p for p in ports if p.get("name") == port_name and p.get("port")]
    if named:
        port = named[0]["port"]
    elif len(ports) == 1 and ports[0].get("port"):
        port = ports[0]["port"]
    else:
        return set()
    urls = set()
    for endpoint in endpoint_slice.get("endpoints") or []:
        conditions = endpoint.get("conditions") or {}
        if conditions.get("ready") is False or conditions.get("terminating") is True:
            continue
        urls.update(_url(address, port) for address in endpoint.get("addresses") or [])
    return urls


class SliceSet:
    """The current slices of one Service, reduced to the union of their URLs."""

    def __init__(self, port_name: str) -> None:
        self.port_name = port_name
        self._slices: dict[str, set[str]] = {}

    def replace(self, slices: Iterable[dict[str, Any]]) -> None:
        self._slices = {s["metadata"]["name"]: slice_urls(s, self.port_name) for s in slices}

    def apply(self, event_type: str, endpoint_slice: dict[str, Any]) -> None:
        name = endpoint_slice["metadata"]["name"]
        if event_type == "DELETED":
            self._slices.pop(name, None)
        elif event_type in ("ADDED", "MODIFIED"):
            self._slices[name] = slice_urls(endpoint_slice, self.port_name)

    def urls(self) -> set[str]:
        return set().union(*self._slices.values())


async def watch_endpoint_slices(
    api: client.ApiClient, namespace: str, service: str, port_name: str, on_change: Callable[[set[str]], None]
) -> None:
    """List, then watch, the Service's EndpointSlices, calling ``on_change`` with the URLs after each change.

    Runs until cancelled. A watch that expires (410 Gone) or breaks is re-listed after a short backoff; the
    last known endpoints stay in use meanwhile.
    """
    discovery = client.DiscoveryV1Api(api)
    selector = f"{SERVICE_LABEL}={service}"
    slices = SliceSet(port_name)
    failures = 0
    while True:
        try:
            listed = await discovery.list_namespaced_endpoint_slice(namespace, label_selector=selector)
            slices.replace(api.sanitize_for_serialization(s) for s in listed.items)
            on_change(slices.urls())
            version = listed.metadata.resource_version
            failures = 0
            while True:
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        discovery.list_namespaced_endpoint_slice, namespace, label_selector=selector,
                        resource_version=version, timeout_seconds=WATCH_TIMEOUT_S, allow_watch_bookmarks=True,
                    ):  # fmt: skip
                        obj = api.sanitize_for_serialization(event["object"])
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event["type"] == "BOOKMARK":
                            continue
                        slices.apply(event["type"], obj)
                        on_change(slices.urls())
        except asyncio.CancelledError:
            raise
        except ApiException as exc:
            if exc.status != 410:
                log.warning("EndpointSlice watch of %s/%s: %s %s", namespace, service, exc.status, exc.reason)
        except Exception as exc:  # network trouble: keep the last endpoints, back off, list again
            log.warning("EndpointSlice watch of %s/%s failed: %s", namespace, service, exc)
        await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
        failures += 1
