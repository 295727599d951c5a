"""``spec.networkPolicy``: the engines' NetworkPolicy, built from a ModelDeployment and the operator's flags (pure
builders, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from paged_operator.cli import build_parser, render_settings
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.render.all_children import all_children
from paged_operator.render.network_policy import network_policy
from paged_operator.render.settings import (
    NAMESPACE_NAME_LABEL,
    Images,
    NetworkPeers,
    Peer,
    RenderSettings,
    labelled_peer,
    operator_peer,
    parse_label,
)
from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.budgets import Budgets

UID = "7f1c8d2e-0000-4000-8000-000000000003"
OPERATOR = {"app.kubernetes.io/name": "paged", "app.kubernetes.io/component": "operator"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
PEERS = NetworkPeers(operator=operator_peer("paged-system", OPERATOR), prometheus=labelled_peer({}, PROMETHEUS))


def md(spec: dict[str, Any] | None = None) -> ModelDeployment:
    spec = {"networkPolicy": {"enabled": True}, **(spec or {})}
    return ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": spec})


def ports(obj: ModelDeployment) -> dict[str, int]:
    """The engine container's ports by name, as the Deployment renders them."""
    (container,) = children.deployment(obj, UID)["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def rule_ports(rule: dict[str, Any]) -> list[int]:
    assert all(p["protocol"] == "TCP" for p in rule["ports"])
    return [p["port"] for p in rule["ports"]]


def test_it_is_off_by_default_and_no_policy_is_rendered() -> None:
    off = ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": {}})
    assert off.spec.network_policy.enabled is False and network_policy(off, UID, PEERS) is None
    built = all_children(
        off, UID, admin_token="t" * 32, budgets=Budgets(8, 512), router_cluster_role="r", settings=RenderSettings()
    )
    assert built.network_policy is None
    assert "NetworkPolicy" not in [c["kind"] for c in built.in_apply_order()]


def test_the_policy_selects_the_engine_pods_and_admits_each_client_on_its_ports_only() -> None:
    obj = md(
        {
            "router": {"enabled": True},
            "networkPolicy": {"enabled": True, "allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
        }
    )
    policy = network_policy(obj, UID, PEERS)
    assert policy is not None
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    meta = policy["metadata"]
    assert (meta["name"], meta["namespace"]) == ("gemma", "team-a") and meta["ownerReferences"][0]["uid"] == UID
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "paged-operator"  # watched for drift like the others
    spec = policy["spec"]
    engine_pods = children.deployment(obj, UID)["spec"]["template"]["metadata"]["labels"]
    router_pods = router_children.router_deployment(obj, UID)["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= engine_pods.items()
    assert not spec["podSelector"]["matchLabels"].items() <= router_pods.items()  # the router stays reachable
    assert spec["policyTypes"] == ["Ingress"]
    api, admin = ports(obj)["http"], ports(obj)["admin"]
    router, operator, prometheus, allowed = spec["ingress"]
    ((router_peer,),) = [router["from"]]
    assert router_peer == {"podSelector": {"matchLabels": router_children.router_selector(obj)}}  # this namespace
    assert router_peer["podSelector"]["matchLabels"].items() <= router_pods.items() and rule_ports(router) == [api]
    assert operator["from"] == [
        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "paged-system"}},
         "podSelector": {"matchLabels": OPERATOR}}
    ]  # fmt: skip
    assert rule_ports(operator) == [api, admin]  # /metrics, and the budgets it pushes to /admin
    assert prometheus["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": PROMETHEUS}}]
    assert rule_ports(prometheus) == [api]  # /metrics only: never the admin port
    assert allowed["from"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}] and rule_ports(allowed) == [api]


def test_a_client_the_operator_does_not_know_gets_no_rule_rather_than_one_that_admits_everyone() -> None:
    """Without a router, an operator namespace or Prometheus labels, nothing is admitted (an empty peer would admit
    every pod of the cluster)."""
    assert labelled_peer({}, {}) is None and operator_peer(None, OPERATOR) is None
    policy = network_policy(md(), UID, NetworkPeers())
    assert policy is not None and policy["spec"]["ingress"] == []
    # The operator's namespace without pod labels: every pod of that namespace, no other.
    (rule,) = network_policy(md(), UID, NetworkPeers(operator=operator_peer("ops", {})))["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "ops"}}, "podSelector": {}}]


def test_the_policy_is_applied_before_the_engines_it_guards() -> None:
    built = all_children(
        md({"router": {"enabled": True}}),
        UID,
        admin_token="t" * 32,
        budgets=Budgets(8, 512),
        router_cluster_role="r",
        settings=RenderSettings(peers=PEERS),
    )
    kinds = [(c["kind"], c["metadata"]["name"]) for c in built.in_apply_order()]
    assert kinds.index(("NetworkPolicy", "gemma")) < kinds.index(("Deployment", "gemma"))
    assert built.network_policy == network_policy(md({"router": {"enabled": True}}), UID, PEERS)


def test_the_operators_flags_are_its_render_settings() -> None:
    key = ["--token-key-file", "/dev/null"]
    flags = [
        "--engine-image", "mirror.local/paged-engine:0.1.0", "--router-image", "mirror.local/paged-operator:0.1.0",
        "--operator-pod-label", "app.kubernetes.io/name=paged",
        "--operator-pod-label", "app.kubernetes.io/component=operator",
        "--prometheus-namespace-label", "kubernetes.io/metadata.name=monitoring",
        "--prometheus-pod-label", "app.kubernetes.io/name=prometheus",
    ]  # fmt: skip
    settings = render_settings(build_parser().parse_args(["run", "-A", *key, *flags]), "paged-system")
    assert settings == RenderSettings(
        images=Images(engine="mirror.local/paged-engine:0.1.0", router="mirror.local/paged-operator:0.1.0"),
        peers=NetworkPeers(
            operator=Peer({NAMESPACE_NAME_LABEL: "paged-system"}, OPERATOR),
            prometheus=Peer({NAMESPACE_NAME_LABEL: "monitoring"}, PROMETHEUS),
        ),
    )
    defaults = render_settings(build_parser().parse_args(["run", "-A", *key]), None)
    assert defaults == RenderSettings()  # this release's images; no operator pod to name outside a cluster


@pytest.mark.parametrize("bad", ["no-equals", "=v", "bad key=v", "k=has space", f"k={'v' * 64}", "-k=v"])
def test_a_label_flag_that_is_no_kubernetes_label_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="label"):
        parse_label(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-A", "--token-key-file", "k", "--operator-pod-label", bad])
