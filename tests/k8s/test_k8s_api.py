"""The API server is real: CRD structural schema and CEL validation, resourceVersions, optimistic concurrency,
server-side apply ownership, and the status and scale subresources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.cluster.client import ApiError, KubeClient, has_condition, wait_for

pytestmark = pytest.mark.k8s

GROUP = "testbed.paged.dev"
CRD_NAME = f"widgets.{GROUP}"
CEL_MESSAGE = "minReplicas must not exceed maxReplicas"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["model"],
                                "x-kubernetes-validations": [
                                    {"rule": "self.minReplicas <= self.maxReplicas", "message": CEL_MESSAGE}
                                ],
                                "properties": {
                                    "model": {"type": "string", "minLength": 1},
                                    "replicas": {"type": "integer", "minimum": 0, "maximum": 16},
                                    "minReplicas": {"type": "integer", "minimum": 0, "default": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 0, "default": 16},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "observedGeneration": {"type": "integer"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def widget_crd(kube_admin: KubeClient) -> Iterator[str]:
    """The Widget CRD, established; returns its API prefix."""
    kube_admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)

    def established() -> bool:
        return has_condition(
            kube_admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"), "Established"
        )

    wait_for(f"CRD {CRD_NAME} Established", established, timeout_s=30)
    # Discovery of a new group lags establishment by a moment: wait until the collection answers.
    wait_for("widgets collection served", lambda: kube_admin.get(f"/apis/{GROUP}/v1alpha1/widgets"), timeout_s=30)
    yield f"/apis/{GROUP}/v1alpha1"
    kube_admin.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_valid_object_round_trips_with_defaults_and_new_resource_version(
    kube_admin: KubeClient, widget_crd: str, kube_namespace: str
) -> None:
    collection = f"{widget_crd}/namespaces/{kube_namespace}/widgets"
    created = kube_admin.create(collection, widget("a", model="gemma", replicas=1))
    read = kube_admin.get(f"{collection}/a")
    assert read["metadata"]["uid"] == created["metadata"]["uid"]
    assert read["spec"] == {"model": "gemma", "replicas": 1, "minReplicas": 0, "maxReplicas": 16}  # schema defaults

    read["spec"]["replicas"] = 2
    updated = kube_admin.replace(f"{collection}/a", read)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["generation"] == 2
    assert kube_admin.get(f"{collection}/a")["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


def test_schema_and_cel_violations_are_rejected_with_their_messages(
    kube_admin: KubeClient, widget_crd: str, kube_namespace: str
) -> None:
    collection = f"{widget_crd}/namespaces/{kube_namespace}/widgets"
    with pytest.raises(ApiError) as cel:
        kube_admin.create(collection, widget("bad-range", model="gemma", minReplicas=5, maxReplicas=2))
    assert cel.value.code == 422 and cel.value.reason == "Invalid"
    assert CEL_MESSAGE in cel.value.message

    with pytest.raises(ApiError) as schema:
        kube_admin.create(collection, widget("too-many", model="gemma", replicas=17))
    assert schema.value.code == 422
    assert "spec.replicas" in schema.value.message and "16" in schema.value.message

    with pytest.raises(ApiError) as required:
        kube_admin.create(collection, widget("no-model", replicas=1))
    assert required.value.code == 422 and "spec.model" in required.value.message
    assert not kube_admin.exists(f"{collection}/bad-range")


def test_stale_resource_version_conflicts(kube_admin: KubeClient, widget_crd: str, kube_namespace: str) -> None:
    collection = f"{widget_crd}/namespaces/{kube_namespace}/widgets"
    stale = kube_admin.create(collection, widget("c", model="gemma", replicas=1))
    kube_admin.patch(f"{collection}/c", {"spec": {"replicas": 3}})
    stale["spec"]["replicas"] = 2
    with pytest.raises(ApiError) as conflict:
        kube_admin.replace(f"{collection}/c", stale)
    assert conflict.value.code == 409 and conflict.value.reason == "Conflict"
    assert kube_admin.get(f"{collection}/c")["spec"]["replicas"] == 3


def test_server_side_apply_tracks_field_managers_and_conflicts(
    kube_admin: KubeClient, widget_crd: str, kube_namespace: str
) -> None:
    path = f"{widget_crd}/namespaces/{kube_namespace}/widgets/ssa"
    applied = kube_admin.apply(path, widget("ssa", model="gemma", replicas=1), field_manager="paged-ctl")
    managers = {entry["manager"] for entry in applied["metadata"]["managedFields"]}
    assert managers == {"paged-ctl"}

    # Another manager setting a field paged-ctl owns, to a different value, is a conflict naming the owner.
    with pytest.raises(ApiError) as conflict:
        kube_admin.apply(path, widget("ssa", model="gemma", replicas=4), field_manager="autoscaler")
    assert conflict.value.code == 409
    assert "paged-ctl" in conflict.value.message and ".spec.replicas" in conflict.value.message

    # Forcing takes ownership of the field; the first manager keeps the fields it alone set.
    forced = kube_admin.apply(path, {**widget("ssa"), "spec": {"replicas": 4}}, field_manager="autoscaler", force=True)
    assert forced["spec"]["replicas"] == 4 and forced["spec"]["model"] == "gemma"
    owners = {entry["manager"]: entry["fieldsV1"]["f:spec"] for entry in forced["metadata"]["managedFields"]}
    assert "f:replicas" in owners["autoscaler"] and "f:replicas" not in owners["paged-ctl"]
    assert "f:model" in owners["paged-ctl"]


def test_status_subresource_is_separate_from_spec(kube_admin: KubeClient, widget_crd: str, kube_namespace: str) -> None:
    collection = f"{widget_crd}/namespaces/{kube_namespace}/widgets"
    created = kube_admin.create(collection, {**widget("s", model="gemma", replicas=2), "status": {"replicas": 9}})
    assert "status" not in created  # status on create is dropped when the subresource is enabled

    status = kube_admin.patch(f"{collection}/s/status", {"status": {"replicas": 2, "observedGeneration": 1}})
    assert status["status"] == {"replicas": 2, "observedGeneration": 1}
    assert status["metadata"]["generation"] == 1  # status writes do not bump the generation

    # A spec change through /status is ignored, and a status change through the main resource too.
    kube_admin.patch(f"{collection}/s/status", {"spec": {"replicas": 5}})
    kube_admin.patch(f"{collection}/s", {"status": {"replicas": 7}})
    final = kube_admin.get(f"{collection}/s")
    assert final["spec"]["replicas"] == 2 and final["status"]["replicas"] == 2


def test_scale_subresource_maps_replicas(kube_admin: KubeClient, widget_crd: str, kube_namespace: str) -> None:
    collection = f"{widget_crd}/namespaces/{kube_namespace}/widgets"
    kube_admin.create(collection, widget("sc", model="gemma", replicas=1))
    kube_admin.patch(f"{collection}/sc/status", {"status": {"replicas": 1}})
    scale = kube_admin.get(f"{collection}/sc/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1 and scale["status"]["replicas"] == 1

    kube_admin.patch(f"{collection}/sc/scale", {"spec": {"replicas": 3}})
    assert kube_admin.get(f"{collection}/sc")["spec"]["replicas"] == 3
    with pytest.raises(ApiError) as invalid:
        kube_admin.patch(f"{collection}/sc/scale", {"spec": {"replicas": 17}})
    assert invalid.value.code == 422
