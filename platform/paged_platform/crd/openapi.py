"""Turn a pydantic JSON schema into a Kubernetes *structural* OpenAPI v3 schema.

The API server accepts only a subset of OpenAPI v3 in a CRD, and only "structural" schemas: every node
has a ``type`` (unless it is int-or-string or free-form), no ``$ref``, ``anyOf`` only as a pure value
constraint. Pydantic emits JSON Schema 2020-12 with ``$defs``; this module bridges the two and refuses
what it cannot express rather than emitting a schema the server would reject.

``X | None`` becomes plain ``X``, deliberately not ``nullable: true``: for a non-nullable field the API
server prunes an explicit ``null`` before defaulting, so ``null`` means "unset" on the server exactly as
``None`` does in pydantic, and CEL's ``has(self.field)`` stays false for it. A nullable field would keep
the ``null``, and ``has()`` would be true for a value every rule would then have to guard against.
"""

from __future__ import annotations

from typing import Any

# Keys the CRD schema subset accepts (besides the x-kubernetes-* extensions).
_ALLOWED_KEYS = frozenset(
    {
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
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "nullable",
        "anyOf",
    }
)
_DROPPED_KEYS = frozenset({"title", "$defs", "examples"})


class SchemaConversionError(ValueError):
    """A pydantic schema feature has no structural OpenAPI equivalent; ``path`` names where."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '<root>'}: {message}")
        self.path = path


def to_structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Convert a top-level pydantic JSON schema (with its ``$defs``) into a structural OpenAPI v3 schema."""
    return _convert(schema, schema.get("$defs", {}), "")


def _resolve(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Inline ``$ref`` (and pydantic's single-element ``allOf`` wrapper); sibling keys win over the target's."""
    if "allOf" in node:
        parts = node["allOf"]
        if len(parts) != 1:
            raise SchemaConversionError(path, "allOf with more than one schema is not supported")
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **parts[0]}
    if "$ref" in node:
        ref = node["$ref"]
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
            raise SchemaConversionError(path, f"unresolvable $ref {ref!r}")
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = _resolve({**defs[ref[len(prefix) :]], **siblings}, defs, path)
    return node


def _convert(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = _resolve(node, defs, path)
    out: dict[str, Any] = {}

    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = node["anyOf"]
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) != 1:
            raise SchemaConversionError(path, "unions other than 'X | None' are not supported")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return _convert({**_resolve(non_null[0], defs, path), **rest}, defs, path)

    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs, f"{path}.*")
            # False: the API server prunes unknown fields (and strict field validation reports them).
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020-12 gives the bound; OpenAPI 3.0 gives the bound in minimum/maximum plus a flag.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "anyOf":  # an int-or-string value constraint: keep the plain type alternatives
            out["anyOf"] = [{"type": o["type"]} for o in value]
        elif key in _ALLOWED_KEYS or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise SchemaConversionError(path, f"JSON Schema keyword {key!r} has no structural OpenAPI equivalent")

    if out.get("type") == "null":
        raise SchemaConversionError(path, "a field that can only be null is not supported")
    if "type" not in out and not (
        out.get("x-kubernetes-int-or-string") or out.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaConversionError(path, "every node of a structural schema needs a type")
    if out.get("x-kubernetes-preserve-unknown-fields") and "type" not in out:
        out["type"] = "object"
    return out
