"""Kubernetes access for paged-ctl: kubeconfig loading like kubectl, and the few calls it makes.

Everything the API server can say "no" to comes back as a :class:`KubeError` with a one-line, user-facing
message (the server's own validation messages included), so the CLI never shows a traceback for them.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from paged_platform.api import GROUP, PLURAL, VERSION

FIELD_MANAGER = "paged-ctl"
REQUEST_TIMEOUT_S = 30.0
_T = {"_request_timeout": REQUEST_TIMEOUT_S}
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ExitCode(IntEnum):
    """paged-ctl exit statuses (2 is click's usage error)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    UNREACHABLE = 4


class KubeError(Exception):
    """A failure the user can act on; ``exit_code`` is what the CLI exits with."""

    exit_code: ExitCode = ExitCode.ERROR


class NotFoundError(KubeError):
    exit_code = ExitCode.NOT_FOUND


class UnreachableError(KubeError):
    exit_code = ExitCode.UNREACHABLE


@dataclass(frozen=True)
class KubeTarget:
    """Which cluster and namespace: the kubeconfig file (else ``$KUBECONFIG``, else ``~/.kube/config``,
    else in-cluster), the context (else the current one), the namespace (else the context's, else default)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


def status_message(exc: ApiException) -> str:
    """The API server's message from an error response, with each field cause (validation) spelled out."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or exc.reason or f"HTTP {exc.status}"
    causes = (body.get("details") or {}).get("causes") or []
    if exc.status == 422 and causes:
        parts = [f"{c.get('field', '?')}: {c.get('message', '')}".strip() for c in causes]
        return "refused by the API server: " + "; ".join(parts)
    return message


@contextmanager
def translated(what: str, server: str) -> Iterator[None]:
    """Turn API and connection failures of one call into KubeErrors; ``what`` names the object for 404s."""
    try:
        yield
    except ApiException as exc:
        if exc.status == 404:
            raise NotFoundError(f"{what} not found ({status_message(exc)})") from None
        if exc.status == 403:
            raise KubeError(f"forbidden: {status_message(exc)}") from None
        if exc.status == 401:
            raise KubeError(f"unauthorized at {server}: check the kubeconfig credentials") from None
        raise KubeError(status_message(exc)) from None
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise UnreachableError(f"cannot reach the Kubernetes API server at {server}: {exc}") from None


class Kube:
    """An open connection to one cluster; use :func:`connect`."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.server = api.configuration.host
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    def _crd_missing(self, exc: NotFoundError) -> KubeError:
        return NotFoundError(
            f"the ModelDeployment API ({PLURAL}.{GROUP}) is not installed in this cluster: "
            f"install the chart, or run `paged-ctl crd | kubectl apply -f -` ({exc})"
        )

    async def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or self.namespace
        with translated(f"modeldeployment {name!r} in namespace {ns!r}", self.server):
            return await self._custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, **_T)

    async def list_objects(self, namespace: str | None = None, all_namespaces: bool = False) -> list[dict[str, Any]]:
        try:
            with translated("modeldeployments", self.server):
                if all_namespaces:
                    result = await self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **_T)
                else:
                    result = await self._custom.list_namespaced_custom_object(
                        GROUP, VERSION, namespace or self.namespace, PLURAL, **_T
                    )
        except NotFoundError as exc:
            raise self._crd_missing(exc) from None
        return list(result.get("items", []))

    async def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply as field manager ``paged-ctl`` (conflicts with other managers are reported)."""
        name = obj["metadata"]["name"]
        ns = obj["metadata"].get("namespace") or self.namespace
        body = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
        kwargs: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "field_validation": "Strict",
            "_content_type": "application/apply-patch+yaml",
            **_T,
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            with translated(f"modeldeployment {name!r} in namespace {ns!r}", self.server):
                return await self._custom.patch_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, name, body, **kwargs
                )
        except NotFoundError as exc:
            raise self._crd_missing(exc) from None

    async def patch_spec(self, name: str, spec_patch: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """JSON merge patch of ``spec`` (the operator propagates spec changes to the replicas)."""
        ns = namespace or self.namespace
        with translated(f"modeldeployment {name!r} in namespace {ns!r}", self.server):
            return await self._custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                ns,
                PLURAL,
                name,
                {"spec": spec_patch},
                field_manager=FIELD_MANAGER,
                field_validation="Strict",
                _content_type="application/merge-patch+json",
                **_T,
            )

    async def list_pods(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        ns = namespace or self.namespace
        with translated(f"pods of {selector!r} in namespace {ns!r}", self.server):
            pods = await self._core.list_namespaced_pod(ns, label_selector=selector, **_T)
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    async def pod_get(
        self, pod: str, port: int, path: str, *, pod_ip: str | None = None, namespace: str | None = None
    ) -> str:
        """GET ``path`` on a pod: through the API server's pod proxy (works from outside the cluster), or straight
        at ``pod_ip`` when given (inside the cluster network, where the proxy may be unavailable or forbidden)."""
        if pod_ip is not None:
            url = f"http://{pod_ip}:{port}/{path}"
            try:
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
                    response = await http.get(url)
            except httpx.HTTPError as exc:
                raise UnreachableError(f"cannot reach pod {pod} at {url}: {exc}") from None
            if response.status_code != 200:
                raise KubeError(f"pod {pod} answered {response.status_code} at {url}")
            return response.text
        ns = namespace or self.namespace
        with translated(f"pod {pod!r} port {port} /{path}", self.server):
            return await self._core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:{port}", ns, path, **_T)


def _kubeconfig_path(target: KubeTarget) -> str | None:
    if target.kubeconfig:
        if not Path(target.kubeconfig).expanduser().is_file():
            raise KubeError(f"kubeconfig {target.kubeconfig} does not exist")
        return str(Path(target.kubeconfig).expanduser())
    env = os.environ.get("KUBECONFIG")
    if env:
        # A list of files, merged like kubectl does; missing ones are skipped, as kubectl skips them.
        present = [p for p in env.split(os.pathsep) if p and Path(p).expanduser().is_file()]
        if not present:
            raise KubeError(f"KUBECONFIG={env}: no such file")
        return os.pathsep.join(present)
    default = Path("~/.kube/config").expanduser()
    return str(default) if default.is_file() else None


@asynccontextmanager
async def connect(target: KubeTarget) -> AsyncIterator[Kube]:
    """Open a connection as kubectl would, and close it afterwards."""
    configuration = client.Configuration()
    namespace = target.namespace
    path = _kubeconfig_path(target)
    try:
        if path is not None:
            loader = await config.load_kube_config(
                config_file=path, context=target.context, client_configuration=configuration, persist_config=False
            )
            context_ns = (loader.current_context or {}).get("context", {}).get("namespace")
            namespace = namespace or context_ns
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                config.load_incluster_config(client_configuration=configuration)
            except ConfigException as exc:
                raise KubeError(f"in-cluster configuration: {exc}") from None
            if not namespace and IN_CLUSTER_NAMESPACE_FILE.is_file():
                namespace = IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
        else:
            raise KubeError("no kubeconfig found: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config")
    except (ConfigException, yaml.YAMLError, OSError) as exc:
        raise KubeError(f"kubeconfig {path}: {exc}") from None
    api = client.ApiClient(configuration=configuration)
    try:
        yield Kube(api, namespace or "default")
    finally:
        await api.close()
