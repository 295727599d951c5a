"""Pure builder of the engines' optional NetworkPolicy (``spec.networkPolicy``).

Once a NetworkPolicy selects the engine pods, only what it admits reaches them: this ModelDeployment's router
pods and Prometheus on the API port (8000: the OpenAI API and ``/metrics``), the operator's pods on the API port
and the admin port (8001: ``/admin/budgets``, which it pushes), and the spec's ``allowFrom`` peers on the API
port. Who the operator and Prometheus are is the operator's configuration (``settings.NetworkPeers``); a peer
it does not know gets no rule rather than a rule that admits everyone. Egress is left alone, and the kubelet's
probes come from the node, which network plugins admit by their own rules.
"""

from __future__ import annotations

from typing import Any

from paged_platform.api import ModelDeployment

from paged_operator.render.children import ADMIN_PORT, ENGINE_PORT, child_metadata, network_policy_name, selector_labels
from paged_operator.render.router import router_selector
from paged_operator.render.settings import NetworkPeers


def _ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def ingress_rules(md: ModelDeployment, peers: NetworkPeers) -> list[dict[str, Any]]:
    """The policy's rules: one per kind of client, each with only the ports that client uses."""
    api = _ports(ENGINE_PORT)
    rules: list[dict[str, Any]] = []
    if md.spec.router.enabled:
        rules.append({"from": [{"podSelector": {"matchLabels": router_selector(md)}}], "ports": api})
    if peers.operator is not None:
        rules.append({"from": [peers.operator.to_wire()], "ports": _ports(ENGINE_PORT, ADMIN_PORT)})
    if peers.prometheus is not None:
        rules.append({"from": [peers.prometheus.to_wire()], "ports": api})
    if allowed := md.spec.network_policy.allow_from:
        rules.append({"from": [dict(peer) for peer in allowed], "ports": api})
    return rules


def network_policy(md: ModelDeployment, uid: str, peers: NetworkPeers) -> dict[str, Any] | None:
    """The engines' NetworkPolicy while ``spec.networkPolicy.enabled``, else None."""
    if not md.spec.network_policy.enabled:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(md, network_policy_name(md), uid),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(md)},
            "policyTypes": ["Ingress"],
            "ingress": ingress_rules(md, peers),
        },
    }
