"""Pure builders of the optional router's children (``spec.router``): its Deployment, Service and
PodDisruptionBudget, and the ServiceAccount and RoleBinding that let it watch the engines' EndpointSlices. The
rights themselves are the chart's router ClusterRole (``$PAGED_ROUTER_CLUSTER_ROLE``), bound in the
ModelDeployment's namespace only: the operator binds that one role and creates no Role of its own.

Every object is named ``<name>-router`` and labelled ``paged.dev/router: <name>``, never with the engines'
selector label, so the engines' Service and PodDisruptionBudget never select router pods. The router finds the
engines through their Service's EndpointSlices (``kubernetes.io/service-name=<name>``), so it follows
scale-ups, drains and rollouts without the operator telling it anything. What it cannot learn from the engines
while none runs, the names the ModelDeployment will serve, it gets as ``--served-model`` flags, so a request for
one of them waits through a scale from zero and any other name is a 404 at once.

The PodDisruptionBudget lets one router pod at a time be evicted (``maxUnavailable: 1``, as for the engines):
with ``router.replicas`` >= 2 the Service keeps a router through a node drain, and a single router never blocks
a drain (``minAvailable: 1`` would, forever). A rollout (a new router image after an operator upgrade, a spec
change) starts a new pod before it stops an old one (``maxSurge: 1, maxUnavailable: 0``), so a single router is
replaced without a gap.
"""

from __future__ import annotations

from typing import Any

from paged_platform.api import ModelDeployment

from paged_operator.render import pod_security
from paged_operator.render.children import HTTP_PORT_NAME, owner_reference, router_name, service_name
from paged_operator.render.settings import RELEASE_IMAGES, Images
from paged_operator.render.tracing_env import tracing_args, tracing_env

ROUTER_CONTAINER = "router"
ROUTER_PORT = 8080
ROUTER_LABEL = "paged.dev/router"
#: Kinds of the router's children, in the order they are applied (and deleted in reverse).
ROUTER_KINDS = ("ServiceAccount", "RoleBinding", "Service", "PodDisruptionBudget", "Deployment")
#: The chart's ClusterRole for router pods (the chart sets the variable; this is its name in a release "paged").
CLUSTER_ROLE_ENV = "PAGED_ROUTER_CLUSTER_ROLE"
DEFAULT_CLUSTER_ROLE = "paged-router"


def router_selector(md: ModelDeployment) -> dict[str, str]:
    return {ROUTER_LABEL: md.metadata.name}


def router_labels(md: ModelDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "paged-router",
        "app.kubernetes.io/instance": md.metadata.name,
        "app.kubernetes.io/managed-by": "paged-operator",
        **router_selector(md),
    }


def _metadata(md: ModelDeployment, uid: str) -> dict[str, Any]:
    if not md.metadata.namespace:
        raise ValueError(f"ModelDeployment {md.metadata.name!r} has no namespace")
    return {
        "name": router_name(md),
        "namespace": md.metadata.namespace,
        "labels": router_labels(md),
        "ownerReferences": [owner_reference(md, uid)],
    }


def router_args(md: ModelDeployment) -> list[str]:
    return [
        "--host", "0.0.0.0", "--port", str(ROUTER_PORT), "--service", service_name(md),
        "--namespace", md.metadata.namespace or "", "--port-name", HTTP_PORT_NAME, "--policy", md.spec.router.policy,
        "--queue-timeout", str(md.spec.resolved_router_queue_timeout_s()),
        *(arg for name in md.spec.served_model_names() for arg in ("--served-model", name)),
        *tracing_args(md),
    ]  # fmt: skip


def router_resources(md: ModelDeployment) -> dict[str, dict[str, str]]:
    """``router.resources`` as a container's, unset values left out."""
    spec = md.spec.router.resources
    return {
        kind: {name: str(value) for name, value in (("cpu", given.cpu), ("memory", given.memory)) if value is not None}
        for kind, given in (("requests", spec.requests), ("limits", spec.limits))
    }


def router_env(md: ModelDeployment) -> list[dict[str, Any]]:
    """The user's ``router.env``, then ``spec.tracing``'s (minus the names the user set)."""
    user = md.spec.router.env
    return [*user, *tracing_env(md, "router", router_name(md), user)]


def _probe(path: str, period_s: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": HTTP_PORT_NAME}, "periodSeconds": period_s, "failureThreshold": 3}


def router_deployment(md: ModelDeployment, uid: str, images: Images = RELEASE_IMAGES) -> dict[str, Any]:
    """The router pods; a rollout (a new operator's image among others) surges one pod before it takes one away."""
    container: dict[str, Any] = {
        "name": ROUTER_CONTAINER,
        "image": images.router_image(md),
        "command": ["paged-router"],
        "args": router_args(md),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": ROUTER_PORT, "protocol": "TCP"}],
        "resources": router_resources(md),
        "livenessProbe": _probe("/health", 10),
        "readinessProbe": _probe("/ready", 5),
        "securityContext": pod_security.container_security_context(),
    }
    if env := router_env(md):
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(md, uid),
        "spec": {
            "replicas": md.spec.router.replicas,
            "selector": {"matchLabels": router_selector(md)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": router_labels(md)},
                "spec": {
                    "serviceAccountName": router_name(md),
                    "securityContext": pod_security.pod_security_context(),
                    "containers": [container],
                    "enableServiceLinks": False,
                },
            },
        },
    }


def router_service(md: ModelDeployment, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(md, uid),
        "spec": {
            "type": md.spec.router_service_type(),
            "selector": router_selector(md),
            "ports": [{"name": HTTP_PORT_NAME, "port": md.spec.service.port, "targetPort": HTTP_PORT_NAME}],
        },
    }


def router_pod_disruption_budget(md: ModelDeployment, uid: str) -> dict[str, Any]:
    """One router pod at a time may be evicted voluntarily (see the module's docstring)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(md, uid),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": router_selector(md)}},
    }


def router_service_account(md: ModelDeployment, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(md, uid)}


def router_role_binding(md: ModelDeployment, uid: str, cluster_role: str) -> dict[str, Any]:
    """The router ClusterRole's rights (reading EndpointSlices), in this namespace, for the router's account."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(md, uid),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": router_name(md), "namespace": md.metadata.namespace}],
    }


def router_children(
    md: ModelDeployment, uid: str, cluster_role: str, images: Images = RELEASE_IMAGES
) -> list[dict[str, Any]]:
    """The router's objects in apply order (identity and rights before the pods that use them)."""
    return [
        router_service_account(md, uid),
        router_role_binding(md, uid, cluster_role),
        router_service(md, uid),
        router_pod_disruption_budget(md, uid),
        router_deployment(md, uid, images),
    ]
