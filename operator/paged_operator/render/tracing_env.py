"""``spec.tracing`` → what a container gets, by one rule for the engines and the router alike.

* **Off renders nothing**: no flag and no variable, so a ModelDeployment without tracing renders as before (no
  rollout on upgrade). Turning it on, or changing it, rolls the engines and the router.
* **On**: ``--otel-exporter EXPORTER`` and the standard variables (``paged_platform.tracing_contract``):
  ``OTEL_SERVICE_NAME`` (``<name>-engine``, ``<name>-router``: one service per component and ModelDeployment),
  ``OTEL_RESOURCE_ATTRIBUTES`` (the namespace, the Deployment and, through the downward API, the pod), the
  parent-based ratio sampler, and with ``otlp`` the endpoint and protocol. The processes read nothing else, so
  what the operator renders is what a user could set by hand.
* **The user's own variables win**: a name the container's user env already has (``spec.pod.env`` for the
  engines, ``spec.router.env`` for the router) is left out here, so a container never holds a name twice and a
  hand-set ``OTEL_SERVICE_NAME`` or ``OTEL_EXPORTER_OTLP_PROTOCOL`` is the one in force. Likewise
  ``--otel-exporter`` in ``spec.engine.extraArgs`` comes after this flag and wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.launch import ServeFlag
from paged_platform.tracing_contract import (
    ENDPOINT_ENV,
    PARENT_BASED_RATIO,
    PROTOCOL_ENV,
    RESOURCE_ATTRIBUTES_ENV,
    SAMPLER_ARG_ENV,
    SAMPLER_ENV,
    SERVICE_NAME_ENV,
)

Component = Literal["engine", "router"]
#: The same flag for both (the router's CLI names it as the engine's does).
OTEL_EXPORTER_FLAG = str(ServeFlag.OTEL_EXPORTER)
#: The pod's name from the downward API, for ``k8s.pod.name`` (defined before the variable that expands it).
POD_NAME_ENV = "PAGED_POD_NAME"


def tracing_args(md: ModelDeployment) -> list[str]:
    """The ``--otel-exporter`` flag of ``paged-engine serve`` and ``paged-router`` (none when tracing is off)."""
    exporter = md.spec.tracing.exporter
    return [] if exporter == "off" else [OTEL_EXPORTER_FLAG, exporter]


def service_name(md: ModelDeployment, component: Component) -> str:
    return f"{md.metadata.name}-{component}"


def tracing_env(
    md: ModelDeployment, component: Component, deployment: str, user_env: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The variables ``spec.tracing`` sets in ``component``'s container (of Deployment ``deployment``), minus the
    names ``user_env`` sets itself."""
    tracing = md.spec.tracing
    if tracing.exporter == "off":
        return []
    attributes = {
        "k8s.namespace.name": md.metadata.namespace or "",
        "k8s.deployment.name": deployment,
        "k8s.pod.name": f"$({POD_NAME_ENV})",
    }
    env: list[dict[str, Any]] = [
        {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": SERVICE_NAME_ENV, "value": service_name(md, component)},
        {"name": RESOURCE_ATTRIBUTES_ENV, "value": ",".join(f"{k}={v}" for k, v in attributes.items())},
        {"name": SAMPLER_ENV, "value": PARENT_BASED_RATIO},
        {"name": SAMPLER_ARG_ENV, "value": str(tracing.sampling_ratio)},
    ]
    if tracing.exporter == "otlp":
        env += [{"name": ENDPOINT_ENV, "value": tracing.endpoint}, {"name": PROTOCOL_ENV, "value": tracing.protocol}]
    taken = {entry.get("name") for entry in user_env}
    return [entry for entry in env if entry["name"] not in taken]
