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
            if kind == "token_id_keys":  # logit_bias: token ids as the keys of an object
                _bound_keys(node, integer_pattern(limits.vocab_size - 1))
            elif kind is not None:
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


def _bound_keys(node: Any, pattern: str) -> None:
    """Every object schema under ``node`` takes only keys matching ``pattern``."""
    if isinstance(node, dict):
        if "patternProperties" in node:
            node["patternProperties"] = {pattern: next(iter(node["patternProperties"].values()))}
        for value in node.get("anyOf", []):
            _bound_keys(value, pattern)


def integer_pattern(maximum: int) -> str:
    """A regular expression matching the decimal integers 0..``maximum`` (no sign, no leading zeros)."""
    digits = str(maximum)
    alternatives = ["0"] if maximum >= 0 else []
    if len(digits) > 1:
        alternatives.append(f"[1-9][0-9]{{0,{len(digits) - 2}}}")  # every shorter number
    for i, digit in enumerate(digits):  # same length: equal up to position i, then a smaller digit
        low = 1 if i == 0 else 0
        if int(digit) - 1 >= low:
            rest = len(digits) - i - 1
            alternatives.append(f"{digits[:i]}[{low}-{int(digit) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    if maximum > 0:
        alternatives.append(digits)
    return f"^({'|'.join(alternatives)})$"


def _name_the_model(node: dict[str, Any], model_name: str) -> None:
    for branch in node.get("anyOf", [node]):
        if branch.get("type") == "string":
            branch["enum"] = [model_name]
