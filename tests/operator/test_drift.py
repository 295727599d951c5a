"""Drift detection, pure: which fields of a live child no longer hold what the operator renders."""

from __future__ import annotations

import copy

from paged_operator.drift import Checked, describe_repair, drifted_fields, owner_of, rendered_child
from paged_operator.render import children
from paged_operator.render.settings import RenderSettings
from paged_platform.api import ModelDeployment

UID = "00000000-0000-4000-8000-00000000d21f"
SETTINGS = RenderSettings()


def md(**spec: object) -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "ns"}, "spec": spec})


def served(obj: dict) -> dict:
    """``obj`` as the API server returns it: defaults and status added, quantities normalised."""
    live = copy.deepcopy(obj)
    live["metadata"].update(uid="u", resourceVersion="7", generation=3)
    pod = live["spec"]["template"]["spec"]
    pod["dnsPolicy"] = "ClusterFirst"
    container = pod["containers"][0]
    container["terminationMessagePath"] = "/dev/termination-log"
    container["resources"]["requests"]["cpu"] = "1500m"
    live["status"] = {"replicas": 2}
    live["spec"]["replicas"] = 2
    return live


def test_what_the_server_adds_or_normalises_is_not_drift() -> None:
    wanted = children.deployment(md(resources={"cpu": "1.5", "memory": "1Gi"}), UID)
    assert drifted_fields(wanted, served(wanted)) == []


def test_a_changed_image_and_args_are_named_by_path() -> None:
    wanted = children.deployment(md(), UID)
    live = served(children.deployment(md(resources={"cpu": "1.5"}), UID))
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "other:1"
    container["args"] = ["--evil"]
    fields = drifted_fields(wanted, live)
    assert "spec.template.spec.containers[0].image" in fields
    assert "spec.template.spec.containers[0].args" in fields
    assert "spec.template.spec.containers[0].resources.requests.cpu" in fields  # 2 rendered, 1500m live


def test_a_removed_key_or_list_item_is_drift() -> None:
    wanted = children.service(md(), UID)
    live = copy.deepcopy(wanted)
    del live["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    live["spec"]["ports"] = []
    assert drifted_fields(wanted, live) == ["metadata.labels.app.kubernetes.io/managed-by", "spec.ports"]


def test_each_child_is_found_by_kind_and_name_and_strangers_are_not() -> None:
    spec = md(router={"enabled": True})
    for kind, name in [
        ("Deployment", children.deployment_name(spec)),
        ("Service", children.service_name(spec)),
        ("ConfigMap", children.config_map_name(spec)),
        ("PodDisruptionBudget", children.pdb_name(spec)),
        ("Deployment", children.router_name(spec)),
        ("Service", children.router_name(spec)),
    ]:
        child = rendered_child(spec, UID, kind, name, None, SETTINGS)
        assert child is not None and (child["kind"], child["metadata"]["name"]) == (kind, name)
    assert rendered_child(spec, UID, "Deployment", "someone-else", None, SETTINGS) is None
    assert (
        rendered_child(md(), UID, "Deployment", children.router_name(md()), None, SETTINGS) is None
    )  # router disabled


def test_the_owner_is_the_controlling_model_deployment() -> None:
    child = children.service(md(), UID)
    assert owner_of(child) == ("m", UID)
    child["metadata"]["ownerReferences"][0]["controller"] = False
    assert owner_of(child) is None


def test_a_repair_names_what_changed_and_counts_the_rest() -> None:
    assert describe_repair("Service", "m", None) == "Service m was deleted: created again from the ModelDeployment"
    message = describe_repair("Deployment", "m", [f"f{i}" for i in range(6)])
    assert message == "Deployment m was changed by hand (f0, f1, f2, f3 and 2 more): restored to its rendered form"


def test_a_status_update_is_not_checked_again_but_a_spec_or_label_change_is() -> None:
    checked = Checked()
    live = served(children.deployment(md(), UID))
    assert checked.is_new(live) and not checked.is_new(live)
    live["status"] = {"replicas": 3, "readyReplicas": 1}
    live["metadata"]["resourceVersion"] = "8"
    assert not checked.is_new(live)  # same generation: a status update
    live["metadata"]["labels"]["team"] = "x"
    assert checked.is_new(live)
    live["metadata"]["generation"] = 4
    assert checked.is_new(live)
    checked.forget(live)
    assert checked.is_new(live)
