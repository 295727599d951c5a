"""The objects the operator would create for a ModelDeployment, without a cluster (``paged-ctl render``).

They come from the operator's own builders (``paged_operator.render.all_children``), so they cannot drift from
what it applies; ``OperatorFlags`` are the operator's flags that change what it renders, so the CLI renders what
an operator so configured would. Values only a cluster gives are placeholders: the owner's uid (the API server
assigns it) and the admin token (the operator derives it from its key and that uid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paged_platform.api import ModelDeployment

UID_PLACEHOLDER = "<assigned-by-the-api-server>"
TOKEN_PLACEHOLDER = "<derived-by-the-operator-from-its-key-and-the-uid>"


class OperatorMissing(ImportError):
    """paged-ctl was installed without the operator package, whose builders ``render`` needs."""


class BadFlag(ValueError):
    """An ``OperatorFlags`` value the operator would refuse (a label that is no Kubernetes label)."""


@dataclass(frozen=True)
class OperatorFlags:
    """The ``paged-operator run`` flags that change what it renders; unset: the operator's defaults."""

    router_cluster_role: str | None = None
    engine_image: str | None = None
    router_image: str | None = None
    #: The operator's namespace (its ``$POD_NAMESPACE``), and its ``--operator-pod-label`` / ``--prometheus-*-label``.
    operator_namespace: str | None = None
    operator_pod_labels: tuple[str, ...] = ()
    prometheus_namespace_labels: tuple[str, ...] = ()
    prometheus_pod_labels: tuple[str, ...] = ()


def with_namespace(md: ModelDeployment, namespace: str) -> ModelDeployment:
    """``md`` placed in ``namespace`` when its manifest names none (as ``kubectl apply -n`` would place it)."""
    if md.metadata.namespace:
        return md
    return md.model_copy(update={"metadata": md.metadata.model_copy(update={"namespace": namespace})})


def operator_children(md: ModelDeployment, flags: OperatorFlags | None = None) -> list[dict[str, Any]]:
    """Every child of a new ``md`` in the operator's apply order (``md`` must have a namespace), as an operator run
    with ``flags`` renders it.

    A new ModelDeployment has no ConfigMap yet, so its budgets are the spec's starting ones, as the operator's
    first reconcile computes them. The router's RoleBinding names the chart's default ClusterRole unless told.
    """
    try:  # late: the operator's modules are needed by this command only
        from paged_operator.render.all_children import all_children
        from paged_operator.render.children import config_map_budgets
        from paged_operator.render.router import DEFAULT_CLUSTER_ROLE
        from paged_operator.render.settings import from_flags
    except ImportError as exc:
        raise OperatorMissing(f"paged-ctl render needs the paged_operator package ({exc})") from None
    flags = flags or OperatorFlags()
    try:
        settings = from_flags(
            engine_image=flags.engine_image,
            router_image=flags.router_image,
            namespace=flags.operator_namespace,
            pod_labels=flags.operator_pod_labels,
            prometheus_namespace_labels=flags.prometheus_namespace_labels,
            prometheus_pod_labels=flags.prometheus_pod_labels,
        )
    except ValueError as exc:
        raise BadFlag(str(exc)) from None
    built = all_children(
        md,
        UID_PLACEHOLDER,
        admin_token=TOKEN_PLACEHOLDER,
        budgets=config_map_budgets(md, None),
        router_cluster_role=flags.router_cluster_role or DEFAULT_CLUSTER_ROLE,
        settings=settings,
    )
    return built.in_apply_order()
