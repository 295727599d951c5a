"""The optional router's manifests (``spec.router``), built from a ModelDeployment (pure builders, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.render.all_children import all_children
from paged_operator.render.settings import Images, RenderSettings
from paged_platform.api import ModelDeployment
from paged_platform.api.spec import DEFAULT_ROUTER_IMAGE
from paged_platform.engine_contract.budgets import Budgets
from paged_platform.router.cli import parse_options
from paged_platform.router.policies import POLICY_NAMES
from pydantic import ValidationError

UID = "7f1c8d2e-0000-4000-8000-000000000002"
ROLE = "paged-router"


def md(router: dict[str, Any] | None = None, **spec: Any) -> ModelDeployment:
    spec = {"router": {"enabled": True, **(router or {})}, "service": {"port": 9000}, **spec}
    return ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": spec})


SQL = {"name": "sql-lora", "source": {"huggingFace": {"id": "acme/sql-lora"}}}


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


def test_an_unset_router_image_is_the_operators_and_a_rollout_surges_before_it_stops_a_router() -> None:
    """An operator started with a new --router-image rolls the routers that name none onto it, one new pod ready
    before an old one goes (a single router is never gone), as the router's PodDisruptionBudget allows."""
    upgraded = Images(router="ghcr.io/paged/paged-operator:0.2.0")
    for given, image in ((None, upgraded.router), ("registry.local/router:pinned", "registry.local/router:pinned")):
        deployment = router_children.router_deployment(md({"image": given} if given else {}), UID, upgraded)
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image
        assert deployment["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }
    (container,) = router_children.router_deployment(md(), UID)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == DEFAULT_ROUTER_IMAGE


def router_options(obj: ModelDeployment):  # type: ignore[no-untyped-def]
    (container,) = router_children.router_deployment(obj, UID)["spec"]["template"]["spec"]["containers"]
    return parse_options(container["args"])


def test_the_router_is_told_the_declared_models_so_it_holds_them_at_zero_and_refuses_others() -> None:
    options = router_options(md(model={"servedName": "gemma-it"}, adapters=[SQL]))
    assert options.served_models == ("gemma-it", "sql-lora")  # the base model first: where a model-less request goes


def test_the_queue_timeout_outlasts_a_cold_start_unless_set() -> None:
    assert router_options(md()).queue_timeout == 600  # a CPU replica's start-up budget
    assert router_options(md(resources={"gpus": 1})).queue_timeout == 1800  # a GPU's: image pull, weights, graphs
    assert router_options(md(engine={"startupTimeoutSeconds": 3600})).queue_timeout == 3600
    assert router_options(md({"queueTimeoutSeconds": 45}, resources={"gpus": 1})).queue_timeout == 45


def test_the_router_containers_resources_default_to_room_for_its_prefix_index_and_follow_the_spec() -> None:
    def resources(obj: ModelDeployment) -> dict[str, Any]:
        return router_children.router_deployment(obj, UID)["spec"]["template"]["spec"]["containers"][0]["resources"]

    assert resources(md()) == {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
    given = md({"resources": {"requests": {"memory": "2Gi"}, "limits": {"cpu": "4", "memory": "3Gi"}}})
    assert resources(given) == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "3Gi"}}


def test_behind_a_router_the_engines_service_is_cluster_ip_and_the_router_takes_the_type() -> None:
    def types(obj: ModelDeployment) -> tuple[str, str]:
        return children.service(obj, UID)["spec"]["type"], router_children.router_service(obj, UID)["spec"]["type"]

    assert types(md(service={"type": "LoadBalancer"})) == ("ClusterIP", "LoadBalancer")
    assert types(md({"service": {"type": "NodePort"}}, service={"type": "LoadBalancer"})) == ("ClusterIP", "NodePort")
    assert types(md({"service": {"type": "LoadBalancer"}})) == ("ClusterIP", "LoadBalancer")
    off = md({"enabled": False}, service={"type": "LoadBalancer"})
    assert children.service(off, UID)["spec"]["type"] == "LoadBalancer"  # no router: the engines face clients


def test_the_routers_disruption_budget_lets_one_router_pod_go_at_a_time() -> None:
    obj = md({"replicas": 2})
    pdb = router_children.router_pod_disruption_budget(obj, UID)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": router_children.router_selector(obj)}}
    pod_labels = router_children.router_deployment(obj, UID)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb in router_children.router_children(obj, UID, ROLE)


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
    built = all_children(
        on, UID, admin_token=token, budgets=budgets, router_cluster_role=ROLE, settings=RenderSettings()
    )
    assert built.in_apply_order() == [
        children.admin_secret(on, UID, token),
        children.config_map(on, UID, budgets),
        children.service(on, UID),
        children.pod_disruption_budget(on, UID),
        children.deployment(on, UID),
        *router_children.router_children(on, UID, ROLE),
    ]
    off = ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": {}})
    engines_only = all_children(
        off, UID, admin_token=token, budgets=budgets, router_cluster_role=ROLE, settings=RenderSettings()
    )
    kinds = [c["kind"] for c in engines_only.in_apply_order()]
    assert kinds == ["Secret", "ConfigMap", "Service", "PodDisruptionBudget", "Deployment"]
