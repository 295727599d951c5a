"""Every object the operator creates for one ModelDeployment, built in one place.

The reconcile handler applies these and ``paged-ctl render`` prints them, so what the CLI shows is what the
operator applies: a child added here reaches both, and none can be added to one alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.budgets import Budgets

from paged_operator.render import children
from paged_operator.render.network_policy import network_policy
from paged_operator.render.router import router_children
from paged_operator.render.settings import RenderSettings


@dataclass(frozen=True)
class Children:
    """The children by role, since the operator treats them differently (the Secret is created once, never
    re-applied; the Deployment's answer carries the live replica count; the NetworkPolicy and the router's come and
    go with the spec)."""

    admin_secret: dict[str, Any]
    config_map: dict[str, Any]
    service: dict[str, Any]
    pod_disruption_budget: dict[str, Any]
    #: None while ``spec.networkPolicy.enabled`` is off.
    network_policy: dict[str, Any] | None
    deployment: dict[str, Any]
    #: Empty while ``spec.router.enabled`` is off.
    router: list[dict[str, Any]]

    def in_apply_order(self) -> list[dict[str, Any]]:
        """All of them in the order the operator writes them (what the engines read, and the policy that guards
        them, exist before the engines)."""
        return [
            self.admin_secret,
            self.config_map,
            self.service,
            self.pod_disruption_budget,
            *([self.network_policy] if self.network_policy is not None else []),
            self.deployment,
            *self.router,
        ]


def all_children(
    md: ModelDeployment,
    uid: str,
    *,
    admin_token: str,
    budgets: Budgets,
    router_cluster_role: str,
    settings: RenderSettings,
) -> Children:
    """The children of ``md`` owned through ``uid``; ``budgets`` are the ConfigMap's (``config_map_budgets``),
    ``settings`` the operator's configuration (its images, who its NetworkPolicy admits)."""
    images = settings.images
    return Children(
        admin_secret=children.admin_secret(md, uid, admin_token),
        config_map=children.config_map(md, uid, budgets),
        service=children.service(md, uid),
        pod_disruption_budget=children.pod_disruption_budget(md, uid),
        network_policy=network_policy(md, uid, settings.peers),
        deployment=children.deployment(md, uid, images),
        router=router_children(md, uid, router_cluster_role, images) if md.spec.router.enabled else [],
    )
