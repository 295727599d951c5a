"""The served OpenAPI schema states the limits the server enforces, the model's own figures included.

The request models (``protocol.py``) carry the static constraints (ranges, lengths, enums, fields that need
another). Limits that depend on the loaded model (the vocabulary, the context, the logprobs limit) are marked
there with ``x-paged-limit`` and written in here once the model is loaded, so a client or a schema-driven
fuzzer knows e.g. the largest valid token id. Until then the schema is served without them and not cached.
"""

from __future__ import annotations

from typing import Any

from paged_engine.request_limits import RequestLimits

LIMIT_KEY = "x-paged-limit"


def with_model_limits(schema: dict[str, Any], limits: RequestLimits, model_name: str) -> dict[str, Any]:
    """``schema`` with every marked field's integers bounded by ``limits`` and ``model`` naming the served model
    (modified in place and returned)."""
    maxima = {
        "token_id": limits.vocab_size - 1,
        "generated_tokens": limits.max_model_len - 1,
        "logprobs": limits.max_logprobs,
    }

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.pop(LIMIT_KEY, None)
            if kind is not None:
                _bound_integers(node, maxima[kind])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    for component in schema.get("components", {}).get("schemas", {}).values():
        model = component.get("properties", {}).get("model")
        if model is not None:
            model["description"] = f"the served model: {model_name!r} (or omitted)"
            _name_the_model(model, model_name)
    return schema


def _bound_integers(node: Any, maximum: int) -> None:
    """Set ``maximum`` on every integer schema under ``node`` (array items and union branches included)."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            node["maximum"] = min(maximum, node.get("maximum", maximum))
        for key in ("items", "anyOf", "oneOf", "allOf"):
            if key in node:
                _bound_integers(node[key], maximum)
    elif isinstance(node, list):
        for value in node:
            _bound_integers(value, maximum)


def _name_the_model(node: dict[str, Any], model_name: str) -> None:
    for branch in node.get("anyOf", [node]):
        if branch.get("type") == "string":
            branch["enum"] = [model_name]
