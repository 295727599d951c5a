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


#: One ``spec.model`` per source, each valid.
MODEL_SOURCES: list[dict[str, Any]] = [
    {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "v1.0",
                     "tokenSecretRef": {"name": "hf", "key": "token"}}, "cache": {"claimName": "models"}},
    {"s3": {"uri": "s3://weights/qwen/0.5b", "endpoint": "http://minio.storage:9000",
            "credentialsSecretRef": {"name": "s3-creds"}}, "cache": {"sizeLimit": "20Gi"}},
    {"path": {"claimName": "weights", "path": "llama/8b"}},
    {"image": {"reference": "registry.example.com/models/llama:8b", "path": "model"}},
]  # fmt: skip

#: ``spec.model`` values the API server and pydantic both refuse, with the message each gives.
MODEL_SOURCE_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"model": {"huggingFace": {"id": "a/b"}, "s3": {"uri": "s3://bkt/x"}}}, "give at most one of model.huggingFace"),
    ({"model": {"name": "a/b", "path": {"claimName": "w"}}}, "model.name and model.volume are the older form"),
    ({"model": {"path": {"claimName": "w"}, "cache": {"claimName": "c"}}}, "model.cache applies to downloaded"),
    ({"model": {"path": {"claimName": "w", "path": "a/../../etc"}}}, "model.path.path must stay inside the volume"),
    ({"model": {"image": {"reference": "r/m:1", "path": ".."}}}, "model.image.path must stay inside the image"),
    ({"model": {"name": "/models/../etc", "volume": {"claimName": "w"}}}, "model.name must stay under model.volume"),
    ({"model": {"s3": {"uri": "s3://bkt/a/../b"}}}, "model.s3.uri must not contain '..' segments"),
    ({"model": {"huggingFace": {"id": "a/b"}, "cache": {"claimName": "c", "sizeLimit": "1Gi"}}},
     "sizeLimit applies to the per-pod emptyDir"),
    ({"pod": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}, "are the operator's own"),
    ({"pod": {"volumes": [{"name": "adapter-0", "emptyDir": {}}]}}, "are the operator's own"),
]  # fmt: skip

#: ``spec.adapters`` values both refuse (their rules sit on the spec and on each adapter's source).
ADAPTERS_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"adapters": [{"name": "a", "source": {"huggingFace": {"id": "o/a"}}},
                   {"name": "a", "source": {"s3": {"uri": "s3://bkt/a"}}}]}, "every adapter needs a name of its own"),
    ({"adapters": [{"name": "a", "source": {}}]}, "exactly one of huggingFace, s3, path and image"),
    ({"adapters": [{"name": "a", "source": {"huggingFace": {"id": "o/a"}, "path": {"claimName": "w"}}}]},
     "exactly one of huggingFace, s3, path and image"),
    ({"adapters": [{"name": "a", "source": {"path": {"claimName": "w", "path": "../x"}}}]}, "must stay inside"),
]  # fmt: skip


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
