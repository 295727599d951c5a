"""Schema-driven fuzzing of a live ``paged-engine serve`` with schemathesis, over its own OpenAPI schema.

Every operation is tried with cases the schema calls valid (``positive``) and cases that break it
(``negative``: wrong types, out-of-range values, missing fields, bytes that are not JSON); admin operations
also without a token and with a wrong one. Pass criteria, for every response:
- never a 5xx;
- every error is the OpenAI envelope ``{"error": {message, type, param, code}}`` with ``code`` = the status and
  a message that names the field at fault (``param`` when set; else one of the fields sent);
- admin operations without the right token answer 401;
- the server is healthy afterwards.

``python -m e2e.fuzz --examples 500`` runs it against a fresh tiny-model server (the long run, outside CI);
``tests/server/test_fuzz_admin_negative.py`` runs a bounded version.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

PUBLIC = [("/v1/completions", "POST"), ("/v1/chat/completions", "POST"), ("/tokenize", "POST"),
          ("/detokenize", "POST"), ("/v1/models", "GET")]  # fmt: skip
ADMIN = [("/admin/budgets", "GET"), ("/admin/budgets", "PUT"), ("/admin/drain", "GET"), ("/admin/drain", "POST"),
         ("/admin/drain", "DELETE")]  # fmt: skip
ENVELOPE = {"message", "type", "param", "code"}


@dataclass
class Tally:
    """What a run tried and what came back, by ``operation mode``."""

    statuses: Counter[str] = field(default_factory=Counter)
    refused_params: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def examples(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> dict[str, Any]:
        return {"examples": self.examples, "statuses": dict(sorted(self.statuses.items())),
                "refused_params": dict(self.refused_params.most_common()), "problems": self.problems[:20]}  # fmt: skip


def _sent_fields(case: Any) -> set[str]:
    fields = set(case.body) if isinstance(case.body, dict) else set()
    return fields | set(case.query or {})


def schema_fields(raw_schema: dict[str, Any]) -> set[str]:
    """Every field name the schema knows (body properties and parameters): what an error may name."""
    names = {
        p["name"] for item in raw_schema["paths"].values() for op in item.values() for p in op.get("parameters", [])
    }
    for component in raw_schema.get("components", {}).get("schemas", {}).values():
        names |= set(component.get("properties", {}))
    return names


def _names_one(message: str, fields: set[str]) -> bool:
    return any(f and re.search(rf"(?<!\w){re.escape(f)}(?!\w)", message) for f in fields)


def problem(case: Any, response: Any, known: set[str], expect_status: int | None = None) -> str | None:
    """Why this response misses the pass criteria, or None."""
    status = response.status_code
    if status >= 500:
        return f"{status}: {response.text[:300]}"
    if expect_status is not None and status != expect_status:
        return f"expected {expect_status}, got {status}: {response.text[:300]}"
    if status < 400:
        return None
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{status} without the error envelope: {response.text[:300]}"
    if set(error) != ENVELOPE or error["code"] != status or not error["message"]:
        return f"{status} with a malformed envelope: {error}"
    message, param = error["message"], error["param"]
    if param is not None and param not in message:
        return f"{status} names param {param!r} but its message does not: {message!r}"
    sent = _sent_fields(case)
    if param is None and status == 400 and sent and not _names_one(message, sent | known):
        return f"400 names no field (sent {sorted(sent)}): {message!r}"
    return None


def bounded(path: str, body: Any) -> Any:
    """At most 4 choices of 8 tokens, so a served case takes milliseconds on the tiny model."""
    if isinstance(body, dict):
        for key, cap in (("max_tokens", 8), ("max_completion_tokens", 8), ("n", 4), ("min_tokens", 8)):
            if isinstance(body.get(key), int | float) and not isinstance(body[key], bool):
                body[key] = min(body[key], cap)
        if path == "/v1/completions" and body.get("max_tokens") is None:
            body["max_tokens"] = 8  # None would mean up to the whole context
        if (
            path == "/v1/chat/completions"
            and body.get("max_tokens") is None
            and body.get("max_completion_tokens") is None
        ):
            body["max_completion_tokens"] = 8
    return body


def bounded_waits(query: dict[str, Any]) -> dict[str, Any]:
    """The drain's ``wait_seconds``/``linger_seconds`` (valid up to minutes) at most 0.5 s: a case tests their
    validation, not the waiting, and must answer well within its timeout."""
    for key in ("wait_seconds", "linger_seconds"):
        value = query.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0.5:
            query[key] = 0.5
    return query


def fuzz(
    base_url: str,
    schema: Any,
    operation: tuple[str, str],
    mode: GenerationMode,
    headers: dict[str, str],
    examples: int,
    tally: Tally,
    expect_status: int | None = None,
    after: Callable[[], None] | None = None,
) -> None:
    """Sends ``examples`` generated cases of one operation; ``after`` runs after each (to undo admin changes)."""
    path, method = operation
    known = schema_fields(schema.raw_schema)
    name = f"{method} {path} {mode.value}" + ("" if expect_status is None else f" expect {expect_status}")

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=schema[path][method].as_strategy(generation_mode=mode))
    def send(case: Any) -> None:
        if isinstance(case.body, dict):
            case.body = bounded(path, case.body)
        if isinstance(case.query, dict):
            case.query = bounded_waits(case.query)
        try:
            response = case.call(base_url=base_url, headers=headers, timeout=60)
        except requests.RequestException as exc:  # no answer: a problem to report, not the end of the run
            tally.statuses[f"{name} no answer"] += 1
            tally.problems.append(f"{name}: {type(exc).__name__} (body {str(case.body)[:200]}, query {case.query})")
            return
        finally:
            if after is not None:
                after()
        tally.statuses[f"{name} {response.status_code}"] += 1
        found = problem(case, response, known, expect_status)
        if response.status_code >= 400 and found is None:
            tally.refused_params[f"{path} {response.json()['error']['param']}"] += 1
        if found is not None:
            tally.problems.append(f"{name}: {found} (body {str(case.body)[:200]}, query {case.query})")

    send()


def has_inputs(raw_schema: dict[str, Any], operation: tuple[str, str]) -> bool:
    """Whether an operation takes a body or parameters (without, no case can break its schema)."""
    path, method = operation
    spec = raw_schema["paths"][path][method.lower()]
    return bool(spec.get("requestBody") or spec.get("parameters"))


def fuzz_public(base_url: str, raw_schema: dict[str, Any], api_key: str, modes: list[GenerationMode],
                examples: int, tally: Tally) -> None:  # fmt: skip
    schema = schemathesis.openapi.from_dict(raw_schema)
    for operation in PUBLIC:
        for mode in modes:
            if mode is GenerationMode.POSITIVE or has_inputs(raw_schema, operation):
                fuzz(base_url, schema, operation, mode, {"Authorization": f"Bearer {api_key}"}, examples, tally)


def fuzz_admin(base_url: str, raw_schema: dict[str, Any], api_key: str, admin_token: str, examples: int,
               tally: Tally) -> None:  # fmt: skip
    """Admin operations both ways with the token, and refused (401) without it, with a wrong one or the API
    key; after each case the server's budgets and drain state are put back."""
    schema = schemathesis.openapi.from_dict(raw_schema)
    admin = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=base_url, headers=admin, timeout=30) as client:
        budgets = client.get("/admin/budgets").json()
        original = {k: budgets[k] for k in ("max_num_seqs", "max_num_batched_tokens")}

        def restore() -> None:
            client.delete("/admin/drain").raise_for_status()
            client.put("/admin/budgets", json=original).raise_for_status()

        for operation in ADMIN:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if mode is GenerationMode.POSITIVE or has_inputs(raw_schema, operation):
                    fuzz(base_url, schema, operation, mode, admin, examples, tally, after=restore)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {api_key}"}):
                fuzz(base_url, schema, operation, GenerationMode.POSITIVE, headers, max(examples // 4, 1), tally,
                     expect_status=401, after=restore)  # fmt: skip


def check_health(base_url: str, tally: Tally) -> None:
    health = httpx.get(f"{base_url}/health", timeout=30)
    if health.status_code != 200:
        tally.problems.append(f"/health answers {health.status_code} after the run")


def main() -> int:
    from tests.server.conftest import ADMIN_TOKEN, API_KEY, COMMON_ARGS, build_tiny_gemma, start_server

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=500, help="per public operation and mode")
    parser.add_argument("--admin-examples", type=int, default=200, help="per admin operation and mode")
    parser.add_argument("--json", type=Path, help="also write the tally here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        for folder in ("model", "logs"):
            (Path(tmp) / folder).mkdir()
        server = start_server(build_tiny_gemma(Path(tmp) / "model"), Path(tmp) / "logs", *COMMON_ARGS,
                              "--api-key", API_KEY, "--admin-token", ADMIN_TOKEN)  # fmt: skip
        tally = Tally()
        try:
            raw = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
            modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
            fuzz_public(server.url, raw, API_KEY, modes, args.examples, tally)
            fuzz_admin(server.url, raw, API_KEY, ADMIN_TOKEN, args.admin_examples, tally)
            check_health(server.url, tally)
        finally:
            code = server.stop()
    if code != 0:
        tally.problems.append(f"the server exited with {code}")
    text = json.dumps(tally.summary(), indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if tally.problems else 0


if __name__ == "__main__":
    sys.exit(main())
