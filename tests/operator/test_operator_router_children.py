"""The optional router's manifests (``spec.router``), built from a ModelDeployment (pure builders, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.render.all_children import all_children
from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.budgets import Budgets
from paged_platform.router.cli import parse_options
from paged_platform.router.policies import POLICY_NAMES
from pydantic import ValidationError

UID = "7f1c8d2e-0000-4000-8000-000000000002"
ROLE = "paged-router"


def md(router: dict[str, Any] | None = None) -> ModelDeployment:
    spec = {"router": {"enabled": True, **(router or {})}, "service": {"port": 9000}}
    return ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": spec})


def test_the_spec_offers_exactly_the_routers_policies_and_is_off_by_default() -> None:
    field = ModelDeployment.model_validate({"metadata": {"name": "x", "namespace": "n"}, "spec": {}}).spec.router
    assert field.enabled is False
    assert field.policy == "cache_aware"
    for policy in POLICY_NAMES:
        assert md({"policy": policy}).spec.router.policy == policy
    with pytest.raises(ValidationError, match="policy"):
        md({"policy": "random"})
    with pytest.raises(ValidationError, match="replicas"):
        md({"replicas": 0})


def test_router_objects_are_owned_named_and_never_selected_by_the_engines() -> None:
    obj = md()
    engine_selector = children.selector_labels(obj)
    for child in router_children.router_children(obj, UID, ROLE):
        meta = child["metadata"]
        assert meta["name"] == "gemma-router" and meta["namespace"] == "team-a"
        assert meta["ownerReferences"][0]["uid"] == UID
        assert not set(engine_selector.items()) & set(meta["labels"].items()), child["kind"]
    assert [c["kind"] for c in router_children.router_children(obj, UID, ROLE)] == list(router_children.ROUTER_KINDS)


def test_the_router_deployment_runs_paged_router_against_the_engines_service() -> None:
    obj = md({"policy": "prefix", "replicas": 2, "image": "registry.local/paged-operator:dev"})
    deployment = router_children.router_deployment(obj, UID)
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == "gemma-router"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.local/paged-operator:dev"
    assert container["command"] == ["paged-router"]
    options = parse_options(container["args"])  # the args are ones paged-router accepts
    assert (options.service, options.namespace, options.policy) == (children.service_name(obj), "team-a", "prefix")
    assert options.port_name == children.HTTP_PORT_NAME
    assert container["ports"][0]["containerPort"] == options.port


def test_the_router_service_fronts_the_router_pods_on_the_service_port() -> None:
    obj = md()
    service = router_children.router_service(obj, UID)
    assert service["spec"]["selector"] == router_children.router_selector(obj)
    assert service["spec"]["ports"][0]["port"] == 9000
    assert children.endpoint(obj) == "http://gemma-router.team-a.svc:9000/v1"
    plain = ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": {}})
    assert children.endpoint(plain) == "http://gemma.team-a.svc:8000/v1"


def test_the_binding_grants_the_charts_router_role_to_the_routers_account_in_its_namespace() -> None:
    binding = router_children.router_role_binding(md(), UID, "release-paged-router")
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "release-paged-router"}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gemma-router", "namespace": "team-a"}]


def test_all_children_holds_the_routers_objects_only_while_it_is_enabled() -> None:
    on, token, budgets = md(), "t" * 32, Budgets(8, 512)
    built = all_children(on, UID, admin_token=token, budgets=budgets, router_cluster_role=ROLE)
    assert built.in_apply_order() == [
        children.admin_secret(on, UID, token),
        children.config_map(on, UID, budgets),
        children.service(on, UID),
        children.pod_disruption_budget(on, UID),
        children.deployment(on, UID),
        *router_children.router_children(on, UID, ROLE),
    ]
    off = ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": {}})
    engines_only = all_children(off, UID, admin_token=token, budgets=budgets, router_cluster_role=ROLE)
    kinds = [c["kind"] for c in engines_only.in_apply_order()]
    assert kinds == ["Secret", "ConfigMap", "Service", "PodDisruptionBudget", "Deployment"]
