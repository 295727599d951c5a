"""The objects the operator would create for a ModelDeployment, without a cluster (``paged-ctl render``).

They come from the operator's own builders (``paged_operator.render.all_children``), so they cannot drift from
what it applies. Values only a cluster gives are placeholders: the owner's uid (the API server assigns it) and
the admin token (the operator derives it from its key and that uid).
"""

from __future__ import annotations

from typing import Any

from paged_platform.api import ModelDeployment

UID_PLACEHOLDER = "<assigned-by-the-api-server>"
TOKEN_PLACEHOLDER = "<derived-by-the-operator-from-its-key-and-the-uid>"


class OperatorMissing(ImportError):
    """paged-ctl was installed without the operator package, whose builders ``render`` needs."""


def with_namespace(md: ModelDeployment, namespace: str) -> ModelDeployment:
    """``md`` placed in ``namespace`` when its manifest names none (as ``kubectl apply -n`` would place it)."""
    if md.metadata.namespace:
        return md
    return md.model_copy(update={"metadata": md.metadata.model_copy(update={"namespace": namespace})})


def operator_children(md: ModelDeployment, router_cluster_role: str | None = None) -> list[dict[str, Any]]:
    """Every child of a new ``md`` in the operator's apply order (``md`` must have a namespace).

    A new ModelDeployment has no ConfigMap yet, so its budgets are the spec's starting ones, as the operator's
    first reconcile computes them. The router's RoleBinding names the chart's default ClusterRole unless told.
    """
    try:  # late: the operator's modules are needed by this command only
        from paged_operator.render.all_children import all_children
        from paged_operator.render.children import config_map_budgets
        from paged_operator.render.router import DEFAULT_CLUSTER_ROLE
    except ImportError as exc:
        raise OperatorMissing(f"paged-ctl render needs the paged_operator package ({exc})") from None
    built = all_children(
        md,
        UID_PLACEHOLDER,
        admin_token=TOKEN_PLACEHOLDER,
        budgets=config_map_budgets(md, None),
        router_cluster_role=router_cluster_role or DEFAULT_CLUSTER_ROLE,
    )
    return built.in_apply_order()
