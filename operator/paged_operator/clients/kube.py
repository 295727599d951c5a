"""The operator's calls to the API server: server-side apply, status patches, events, reads.

One async HTTP client built from the same credentials kopf logged in with (``kopf.ConnectionInfo``), so the
operator's own writes and kopf's watches act as the same identity (the ServiceAccount the chart binds).
Errors keep the server's status code, reason and message, so handlers can tell an invalid object (422) from
a failure that a retry may fix.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import ssl
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import kopf
from paged_platform.api import GROUP, PLURAL, VERSION

from paged_operator import operator_metrics

log = logging.getLogger(__name__)
FIELD_MANAGER = "paged-operator"
#: Owns only ``spec.replicas`` of the engine Deployment: the operator is its single writer.
REPLICAS_FIELD_MANAGER = "paged-operator-replicas"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
REPORTING_COMPONENT = "paged-operator"

_COLLECTIONS: dict[str, str] = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",  # spec.networkPolicy
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "Event": "/api/v1/namespaces/{ns}/events",
    "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",  # leader election (``leader``)
    # The optional router's identity and its right to read EndpointSlices.
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


class ApiError(RuntimeError):
    """A non-2xx answer; ``status`` is the server's Status object."""

    def __init__(self, method: str, path: str, code: int, status: Mapping[str, Any]) -> None:
        self.code = code
        self.reason = str(status.get("reason", ""))
        self.message = str(status.get("message", ""))
        super().__init__(f"{method} {path} -> {code} {self.reason}: {self.message}")


def resource_of(path: str) -> str:
    """The resource (and subresource) a request path names: ``.../namespaces/ns/deployments/x`` → ``deployments``,
    ``.../modeldeployments/x/status`` → ``modeldeployments/status``."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts:
        at = parts.index("namespaces") + 2
        named = parts[at : at + 3]
        return "/".join(named[:1] + named[2:3])
    return parts[-1] if parts else ""


def collection_path(kind: str, namespace: str) -> str:
    if kind not in _COLLECTIONS:
        raise ValueError(f"kind {kind!r} is not one the operator manages ({sorted(_COLLECTIONS)})")
    return _COLLECTIONS[kind].format(ns=namespace)


def object_path(kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(kind, namespace)}/{name}"


def model_deployment_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _pem_file(directory: Path, name: str, data: str | bytes) -> str:
    """kubeconfig ``*-data`` fields are base64 PEM; ssl wants files for client certificates."""
    raw = data if isinstance(data, bytes) else data.encode()
    path = directory / name
    path.write_bytes(base64.b64decode(raw))
    path.chmod(0o600)
    return str(path)


def ssl_context(info: kopf.ConnectionInfo, scratch: Path) -> ssl.SSLContext | bool:
    """TLS settings from kopf's connection info (CA and client certificate as paths or inline data)."""
    if info.insecure:
        return False
    ctx = ssl.create_default_context(cafile=str(info.ca_path) if info.ca_path else None)
    if info.ca_data:
        raw = info.ca_data if isinstance(info.ca_data, bytes) else info.ca_data.encode()
        ctx.load_verify_locations(cadata=base64.b64decode(raw).decode())
    cert = info.certificate_path or (info.certificate_data and _pem_file(scratch, "client.crt", info.certificate_data))
    key = info.private_key_path or (info.private_key_data and _pem_file(scratch, "client.key", info.private_key_data))
    if cert:
        ctx.load_cert_chain(str(cert), str(key) if key else None)
    return ctx


class NotLeading(RuntimeError):
    """A write refused before it was sent: this replica no longer holds the operator's Lease (``leader``)."""


class KubeApi:
    """Async REST calls the operator makes. ``timeout_s`` bounds every request.

    ``fence``: asked before every write (anything but GET); False refuses it with ``NotLeading``. With leader
    election it is the elector's ``leading``, so a replica that lost its Lease mid-decision writes nothing more.
    """

    def __init__(self, http: httpx.AsyncClient, *, fence: Callable[[], bool] | None = None) -> None:
        self._http = http
        self._fence = fence
        self._event_counts: dict[str, int] = {}  # Event path → the count last written (one series per key)

    @classmethod
    def from_connection(
        cls, info: kopf.ConnectionInfo, timeout_s: float = 10.0, *, fence: Callable[[], bool] | None = None
    ) -> KubeApi:
        scratch = Path(tempfile.mkdtemp(prefix="paged-operator-"))
        headers = {"Accept": "application/json"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = httpx.BasicAuth(info.username, info.password or "") if info.username else None
        http = httpx.AsyncClient(
            base_url=info.server, verify=ssl_context(info, scratch), headers=headers, auth=auth, timeout=timeout_s
        )
        return cls(http, fence=fence)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        if method != "GET" and self._fence is not None and not self._fence():
            raise NotLeading(f"{method} {path} not sent: this replica does not hold the operator's Lease")
        operator_metrics.API_REQUESTS.labels(method, resource_of(path)).inc()
        response = await self._http.request(
            method,
            path,
            json=body,
            params=params,
            headers={"Content-Type": content_type} if body is not None else None,
        )
        try:
            data = response.json() if response.content else {}
        except ValueError:  # not the API server's JSON: a load balancer's or proxy's page in front of it
            code = response.status_code if response.is_error else 502
            raise ApiError(method, path, code, {"reason": "NotJSON", "message": response.text[:300]}) from None
        if response.is_error:
            raise ApiError(method, path, response.status_code, data if isinstance(data, dict) else {"message": data})
        return data

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        return await self.request("GET", path, params=params or None)

    async def get_optional(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    async def apply(self, obj: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply ``obj`` (forced: the operator is the only writer of the fields it sets)."""
        meta = obj["metadata"]
        path = object_path(obj["kind"], meta["namespace"], meta["name"])
        params = {"fieldManager": field_manager, "force": "true"}
        return await self.request("PATCH", path, obj, params=params, content_type=APPLY)

    async def create_if_absent(self, obj: Mapping[str, Any]) -> bool:
        """Create ``obj`` unless it exists (True when created): for objects apply must not overwrite (secrets)."""
        meta = obj["metadata"]
        try:
            await self.request("POST", collection_path(obj["kind"], meta["namespace"]), obj)
        except ApiError as exc:
            if exc.code == 409:
                return False
            raise
        return True

    async def delete_if_present(self, kind: str, namespace: str, name: str) -> bool:
        """Delete an object (True when it existed); its dependents are collected in the background."""
        try:
            options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
            await self.request("DELETE", object_path(kind, namespace, name), options)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    async def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch the status; with ``resource_version`` only if the object is still at it (else 409)."""
        path = model_deployment_path(namespace, name) + "/status"
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request("PATCH", path, body, content_type=MERGE)

    async def post_event(
        self, owner: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> dict[str, Any]:
        """A core/v1 Event on the ModelDeployment (``kubectl describe md`` lists them), one series per
        (object, reason, type).

        The first occurrence creates the Event under a name derived from that key; later ones bump its
        ``count`` and ``lastTimestamp`` and replace the message (``kubectl`` shows "x5 over 10m"), so a
        failure repeating every decision is one line, not one object per interval. After a restart the
        existing series is found by name (the create answers 409) and continued; an expired one (the API
        server drops Events after its TTL) starts again at 1.
        """
        meta = owner["metadata"]
        namespace, type_ = meta["namespace"], "Warning" if warning else "Normal"
        name = event_name(meta["name"], meta.get("uid") or "", reason, type_)
        path = object_path("Event", namespace, name)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        count = self._event_counts.get(path)
        if count is not None:
            try:
                return await self._bump_event(path, count + 1, now, message)
            except ApiError as exc:
                if exc.code != 404:
                    raise
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": owner.get("apiVersion", f"{GROUP}/{VERSION}"),
                "kind": owner.get("kind", "ModelDeployment"),
                "name": meta["name"],
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": REPORTING_COMPONENT},
            "reportingComponent": REPORTING_COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            created = await self.request("POST", collection_path("Event", namespace), event)
        except ApiError as exc:
            if exc.code != 409:
                raise
            existing = await self.get(path)
            return await self._bump_event(path, int(existing.get("count") or 1) + 1, now, message)
        self._event_counts[path] = 1
        return created

    async def _bump_event(self, path: str, count: int, now: str, message: str) -> dict[str, Any]:
        patch = {"count": count, "lastTimestamp": now, "message": message[:1024]}
        updated = await self.request("PATCH", path, patch, content_type=MERGE)
        self._event_counts[path] = count
        return updated


async def post_warning(kube: KubeApi, body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Warning Event, best effort: failing to report a failure must not hide the failure itself."""
    try:
        await kube.post_event(body, reason=reason, message=message, warning=True)
    except (ApiError, httpx.HTTPError, NotLeading) as exc:
        log.warning("could not post event %s: %s", reason, exc)


def event_name(owner: str, uid: str, reason: str, type_: str) -> str:
    """The Event series' name: the owner's name (for ``kubectl get events``) and a digest of the series' key."""
    digest = hashlib.sha256(f"{uid}/{reason}/{type_}".encode()).hexdigest()[:16]
    return f"{owner[:200]}.{digest}"
