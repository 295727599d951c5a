"""Drift repair on the real control plane: a child deleted or edited by hand comes back in its rendered form, and
the repair is an Event and a decision on the ModelDeployment."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import get_or_none, md_path, model_deployment, settle
from tests.operator_k8s.test_operator_reconcile import apps, children_paths

pytestmark = pytest.mark.k8s

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
REPAIRED_KINDS = ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget")


def repairs(client: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    events = client.get(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in events if e["reason"] == "DriftRepaired"]


def repair_decisions(client: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    decisions = (client.get(md_path(ns, name)).get("status") or {}).get("decisions") or []
    return [d for d in decisions if d["kind"] == "repair"]


def engine_container(client: KubeClient, ns: str, name: str) -> dict[str, Any]:
    (container,) = client.get(f"{apps(ns)}/{name}")["spec"]["template"]["spec"]["containers"]
    return container


def test_each_deleted_child_is_created_again(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns, name = kube_namespace, "drift-del"
    kube_admin.create(md_path(ns), model_deployment(name, autoscaling={"intervalSeconds": 5}))
    paths = children_paths(ns, name)
    wait_for("all children", lambda: all(kube_admin.exists(p) for p in paths.values()), 60)
    for kind in REPAIRED_KINDS:
        child_name = paths[kind].rsplit("/", 1)[1]
        uid = kube_admin.get(paths[kind])["metadata"]["uid"]
        kube_admin.delete(paths[kind])

        def recreated(path: str = paths[kind], old: str = uid) -> dict[str, Any] | None:
            child = get_or_none(kube_admin, path)
            return child if child is not None and child["metadata"]["uid"] != old else None

        child = wait_for(f"{kind} created again", recreated, 30)
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref["kind"] == "ModelDeployment" and ref["controller"] is True

        def recorded(kind: str = kind, child: str = child_name) -> bool:
            reasons = [d["reason"] for d in repair_decisions(kube_admin, ns, name)]
            return any(reason.startswith(f"{kind} {child} was deleted") for reason in reasons)

        wait_for(f"the {kind}'s repair in the decision history", recorded, 30)
    (event,) = repairs(kube_admin, ns, name)  # one Event series per reason, its count bumped per repair
    assert event["count"] >= len(REPAIRED_KINDS) and "was deleted" in event["message"]
    dep = kube_admin.get(paths["Deployment"])
    assert dep["spec"]["replicas"] == 1  # the replica count the operator owns, set again


def test_a_hand_edited_image_and_args_are_restored(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns, name = kube_namespace, "drift-edit"
    kube_admin.create(md_path(ns), model_deployment(name, autoscaling={"intervalSeconds": 5}))
    wait_for("Deployment", lambda: get_or_none(kube_admin, f"{apps(ns)}/{name}"), 60)
    rendered = engine_container(kube_admin, ns, name)
    edit = {"name": rendered["name"], "image": "example.com/other:1", "args": ["--evil"]}
    kube_admin.patch(
        f"{apps(ns)}/{name}", {"spec": {"template": {"spec": {"containers": [edit]}}}}, content_type=STRATEGIC_MERGE
    )

    def restored() -> dict[str, Any] | None:
        container = engine_container(kube_admin, ns, name)
        same = (container["image"], container["args"]) == (rendered["image"], rendered["args"])
        return container if same else None

    wait_for("image and args restored", restored, 30)
    (event,) = wait_for("the repair Event", lambda: repairs(kube_admin, ns, name) or None, 30)
    assert "changed by hand" in event["message"] and "image" in event["message"], event["message"]
    assert wait_for("the repair decision", lambda: repair_decisions(kube_admin, ns, name) or None, 30)


def test_a_label_added_by_hand_is_not_drift(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    """Only fields the operator renders count: what others add stays, and no repair is reported."""
    ns, name = kube_namespace, "drift-extra"
    kube_admin.create(md_path(ns), model_deployment(name, autoscaling={"intervalSeconds": 5}))
    path = f"/api/v1/namespaces/{ns}/services/{name}"
    wait_for("Service", lambda: get_or_none(kube_admin, path), 60)
    kube_admin.patch(path, {"metadata": {"labels": {"team": "search"}}})
    kube_admin.patch(f"{apps(ns)}/{name}", {"metadata": {"annotations": {"note": "hand"}}})
    settle(5)  # a repair would be reported within a second or two
    assert kube_admin.get(path)["metadata"]["labels"]["team"] == "search"
    assert not repairs(kube_admin, ns, name)
