"""Where a decision reads a ModelDeployment's children from: kopf's watches (in-memory indexes), or the API server.

Each decision needs the engine Deployment (its count, who set it), the budgets' ConfigMap and the engine
pods. Read with GET, GET and LIST, that is three requests per ModelDeployment per interval, growing with
the number of ModelDeployments; watched, it is a few long-lived watch requests per namespace, whatever the
number (``docs/operator.md`` has the measured figures). ``IndexReads`` serves them from kopf indexes that
the watches keep current; ``ApiReads`` asks the API server (``--no-child-watches``: no objects held in
memory, the choice for a small operator pod in a very large namespace).

Either way a read may be a moment old: every write that depends on it is a compare-and-swap on the
object's ``resourceVersion`` (``status_writer``), so a stale read costs a retry, never a lost update.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

import kopf

from paged_operator.clients.kube import KubeApi, collection_path, object_path
from paged_operator.render import children
from paged_operator.render.router import ROUTER_LABEL

#: Labels every engine child carries (``children.labels``): the watches select on them.
MANAGED = {"app.kubernetes.io/managed-by": "paged-operator", children.MODEL_DEPLOYMENT_LABEL: kopf.PRESENT}
#: The router pods' (``router_children.router_labels``): their demand wakes a fleet at zero.
ROUTERS = {"app.kubernetes.io/managed-by": "paged-operator", ROUTER_LABEL: kopf.PRESENT}


class ChildReads(Protocol):
    async def deployment(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    async def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    async def pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]: ...

    async def router_pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]: ...


class ApiReads:
    """GET / LIST on every read."""

    def __init__(self, kube: KubeApi) -> None:
        self._kube = kube

    async def deployment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return await self._kube.get_optional(object_path("Deployment", namespace, name))

    async def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return await self._kube.get_optional(object_path("ConfigMap", namespace, name))

    async def pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        selector = f"{children.MODEL_DEPLOYMENT_LABEL}={model_deployment}"
        path = collection_path("Pod", namespace)
        return (await self._kube.get(path, labelSelector=selector))["items"]

    async def router_pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        path = collection_path("Pod", namespace)
        return (await self._kube.get(path, labelSelector=f"{ROUTER_LABEL}={model_deployment}"))["items"]


class IndexReads:
    """Reads from the indexes ``register`` declares (kopf hands them to every handler by name)."""

    def __init__(self, deployments: kopf.Index, config_maps: kopf.Index, pods: kopf.Index, routers: kopf.Index) -> None:
        self._deployments, self._config_maps, self._pods, self._routers = deployments, config_maps, pods, routers

    @classmethod
    def from_handler_kwargs(cls, kwargs: Mapping[str, Any]) -> IndexReads | None:
        """The indexes a handler was given, or None when the watches are off (not registered)."""
        try:
            return cls(
                kwargs["engine_deployments"], kwargs["engine_config_maps"], kwargs["engine_pods"], kwargs["router_pods"]
            )
        except KeyError:
            return None

    async def deployment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return _one(self._deployments, (namespace, name))

    async def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return _one(self._config_maps, (namespace, name))

    async def pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        return list(self._pods.get((namespace, model_deployment), ()))

    async def router_pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        return list(self._routers.get((namespace, model_deployment), ()))


def _one(index: kopf.Index, key: tuple[str, str]) -> Mapping[str, Any] | None:
    return next(iter(index.get(key, ())), None)


def _by_name(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
    return {(namespace or "", name or ""): copy.deepcopy(dict(body))}


def _by_owner(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
    return {(namespace or "", labels[children.MODEL_DEPLOYMENT_LABEL]): copy.deepcopy(dict(body))}


def _by_router(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
    return {(namespace or "", labels[ROUTER_LABEL]): copy.deepcopy(dict(body))}


def register(registry: kopf.OperatorRegistry | None = None) -> None:
    """Declare the watches (before the operator starts): engine Deployments and ConfigMaps by name, engine and
    router pods by their ModelDeployment. The handlers then find them as ``engine_deployments``,
    ``engine_config_maps``, ``engine_pods`` and ``router_pods``."""
    kopf.index("apps", "v1", "deployments", labels=MANAGED, id="engine_deployments", registry=registry)(_by_name)
    kopf.index("v1", "configmaps", labels=MANAGED, id="engine_config_maps", registry=registry)(_by_name)
    kopf.index("v1", "pods", labels=MANAGED, id="engine_pods", registry=registry)(_by_owner)
    kopf.index("v1", "pods", labels=ROUTERS, id="router_pods", registry=registry)(_by_router)
