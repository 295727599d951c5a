"""Shared helpers for the platform tests: API-server-style defaulting and CEL evaluation of the CRD rules."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import celpy
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CHART = REPO / "charts" / "paged"


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Fill in OpenAPI ``default``s the way the API server does before validation (structural defaulting)."""
    obj = copy.deepcopy(obj)
    if isinstance(obj, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                obj[name] = apply_defaults(sub, obj[name])
    elif isinstance(obj, dict) and isinstance(schema.get("additionalProperties"), dict):
        obj = {k: apply_defaults(schema["additionalProperties"], v) for k, v in obj.items()}
    elif isinstance(obj, list) and "items" in schema:
        obj = [apply_defaults(schema["items"], v) for v in obj]
    return obj


# cel-python raises the recursion limit on its first compile; do that now, not inside a hypothesis test
# (hypothesis warns when a test changes the limit it manages).
celpy.Environment().compile("true")


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_holds(rule: str, value: dict[str, Any]) -> bool:
    """Evaluate one CEL rule with ``self`` bound to ``value`` (cel-python; the API server uses cel-go)."""
    result = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
    if isinstance(result, Exception):
        raise result
    return bool(result)


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES
