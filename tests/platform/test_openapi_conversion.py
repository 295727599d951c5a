"""The pydantic JSON schema -> structural OpenAPI converter, on small purpose-built models."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from paged_platform.api.base import ApiModel, IntOrPercent, Quantity, cel
from paged_platform.crd import SchemaConversionError, to_structural
from pydantic import BaseModel, ConfigDict, Field


class Inner(ApiModel):
    """Inner doc."""

    size: int = Field(3, ge=1, le=9)


class Outer(ApiModel):
    """Outer doc."""

    inner: Inner = Field(default_factory=Inner, json_schema_extra={"default": {}})
    maybe: Inner | None = None
    ratio: float = Field(0.5, gt=0, lt=1)
    labels: dict[str, str] = Field(default_factory=dict)
    free: dict[str, Any] | None = None
    mode: Literal["a", "b"] = "a"
    fixed: Literal["only"] = "only"
    memory: Quantity = "1Gi"
    surge: IntOrPercent = 1
    items: list[Inner] = Field(default_factory=list, max_length=4)

    @cel("self.ratio < 1.0", "ratio below one")
    def _rule(self) -> bool:
        return self.ratio < 1.0


def convert(model: type[BaseModel]) -> dict[str, Any]:
    return to_structural(model.model_json_schema(by_alias=True))


def test_refs_are_inlined_and_titles_dropped() -> None:
    schema = convert(Outer)
    assert "$defs" not in schema
    inner = schema["properties"]["inner"]
    assert inner["type"] == "object"
    assert inner["properties"]["size"] == {"default": 3, "minimum": 1, "maximum": 9, "type": "integer"}
    assert inner["default"] == {}
    assert "title" not in str(schema)
    assert "$ref" not in str(schema)


def test_optional_becomes_plain_type_without_null_default() -> None:
    maybe = convert(Outer)["properties"]["maybe"]
    assert maybe["type"] == "object"
    assert "nullable" not in maybe and "default" not in maybe
    assert maybe["description"] == "Inner doc."


def test_exclusive_bounds_use_openapi_v3_form() -> None:
    ratio = convert(Outer)["properties"]["ratio"]
    assert ratio["minimum"] == 0 and ratio["exclusiveMinimum"] is True
    assert ratio["maximum"] == 1 and ratio["exclusiveMaximum"] is True


def test_maps_free_form_and_forbidden_extras() -> None:
    schema = convert(Outer)
    assert schema["properties"]["labels"] == {"additionalProperties": {"type": "string"}, "type": "object"}
    assert schema["properties"]["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    # extra="forbid" is not expressible as a structural schema: the server prunes instead.
    assert "additionalProperties" not in schema


def test_literals_become_enums() -> None:
    props = convert(Outer)["properties"]
    assert props["mode"]["enum"] == ["a", "b"] and props["mode"]["type"] == "string"
    assert props["fixed"]["enum"] == ["only"]


def test_int_or_string_values() -> None:
    props = convert(Outer)["properties"]
    for name in ("memory", "surge"):
        assert props[name]["x-kubernetes-int-or-string"] is True
        assert props[name]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
        assert "type" not in props[name]
    assert props["memory"]["default"] == "1Gi"
    assert props["memory"]["minimum"] == 0 and props["surge"]["minimum"] == 0  # the integer form, like the pattern


def test_lists_and_cel_rules() -> None:
    schema = convert(Outer)
    assert schema["properties"]["items"]["items"]["type"] == "object"
    assert schema["properties"]["items"]["maxItems"] == 4
    assert schema["x-kubernetes-validations"] == [{"rule": "self.ratio < 1.0", "message": "ratio below one"}]


def test_refuses_real_unions() -> None:
    class Union(BaseModel):
        model_config = ConfigDict(title="U")
        value: int | str

    with pytest.raises(SchemaConversionError, match=r"value: unions other than"):
        convert(Union)


def test_refuses_untyped_nodes_and_unknown_keywords() -> None:
    with pytest.raises(SchemaConversionError, match="needs a type"):
        to_structural({"properties": {"x": {"description": "no type"}}, "type": "object"})
    with pytest.raises(SchemaConversionError, match=r"\.x: JSON Schema keyword 'oneOf'"):
        to_structural({"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}]}}})
    with pytest.raises(SchemaConversionError, match="unresolvable"):
        to_structural({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}})
