"""The generated CustomResourceDefinition: structural, carries every rule, defaults agree with pydantic."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from paged_platform.api import ApiModel, ModelDeployment, ModelDeploymentSpec
from paged_platform.api.spec import (
    AdaptiveBudget,
    ModelSource,
    ReplicasSpec,
    RolloutSpec,
    SchedulerBudget,
)
from paged_platform.crd import crd, crd_yaml, openapi_schema

from conftest import CHART, apply_defaults

CHART_CRD = CHART / "crds" / "modeldeployments.paged.dev.yaml"
ALLOWED = {
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "anyOf",
}


def walk(node: dict[str, Any], path: str = ""):
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")


def test_schema_is_structural() -> None:
    for path, node in walk(openapi_schema()):
        extensions = {k for k in node if k.startswith("x-kubernetes-")}
        assert set(node) - extensions <= ALLOWED, f"{path}: unexpected keys {set(node) - extensions - ALLOWED}"
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "anyOf" not in node, path
            assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        for req in node.get("required", []):
            assert req in node["properties"], f"{path}: required {req} is not a property"


def test_root_leaves_metadata_to_the_server() -> None:
    schema = openapi_schema()
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["properties"]["apiVersion"] == {"type": "string"}
    assert schema["required"] == ["spec"]
    assert "default" not in schema["properties"]["status"]


def rules_at(schema: dict[str, Any], path: str) -> list[str]:
    node = schema
    for part in path.split(".")[1:]:
        node = node["properties"][part]
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


@pytest.mark.parametrize(
    ("model", "path"),
    [
        (ModelDeployment, ""),
        (ModelSource, ".spec.model"),
        (ReplicasSpec, ".spec.replicas"),
        (SchedulerBudget, ".spec.schedulerBudget"),
        (RolloutSpec, ".spec.rollout"),
    ],
)
def test_every_python_rule_is_in_the_crd(model: type[ApiModel], path: str) -> None:
    expected = [rule.rule for rule, _ in model.cel_rules()]
    assert expected, f"{model.__name__} declares no rule"
    assert rules_at(openapi_schema(), path) == expected


def test_bounds_rules_on_both_adaptive_ranges() -> None:
    schema = openapi_schema()
    for field in ("maxNumSeqs", "maxNumBatchedTokens"):
        assert rules_at(schema, f".spec.schedulerBudget.adaptive.{field}") == ["self.min <= self.max"]
    assert AdaptiveBudget().max_num_seqs.min <= AdaptiveBudget().max_num_seqs.max


def test_server_defaults_equal_pydantic_defaults() -> None:
    spec_schema = openapi_schema()["properties"]["spec"]
    assert apply_defaults(spec_schema, {}) == ModelDeploymentSpec().to_wire()
    partial = {"autoscaling": {"scaleUp": {"maxStep": 5}}, "replicas": {"max": 4}}
    assert apply_defaults(spec_schema, partial) == ModelDeploymentSpec.model_validate(partial).to_wire()


def test_identity_subresources_and_columns() -> None:
    doc = crd()
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "modeldeployments.paged.dev"
    assert spec["group"] == "paged.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ModelDeployment" and spec["names"]["shortNames"] == ["md"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"]["status"] == {}
    scale = version["subresources"]["scale"]
    schema = version["schema"]["openAPIV3Schema"]
    for key in ("specReplicasPath", "statusReplicasPath"):
        assert resolve(schema, scale[key])["type"] == "integer"
    assert resolve(schema, scale["labelSelectorPath"])["type"] == "string"
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert {"Ready", "Desired", "KV", "Age"} <= set(names)
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"].startswith((".spec", ".status")) and "[" not in column["jsonPath"]:
            assert resolve(schema, column["jsonPath"])["type"] == column["type"], column


def resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    node = schema
    for part in json_path.strip(".").split("."):
        node = node["properties"][part]
    return node


def test_yaml_is_stable_and_round_trips() -> None:
    text = crd_yaml()
    assert text == crd_yaml()
    assert yaml.safe_load(text) == crd()
    assert text.startswith("# Generated by `paged-ctl crd`")


def test_chart_copy_is_the_generated_crd() -> None:
    assert CHART_CRD.read_text() == crd_yaml(), (
        "charts/paged/crds is stale: run `paged-ctl crd > charts/paged/crds/modeldeployments.paged.dev.yaml`"
    )
