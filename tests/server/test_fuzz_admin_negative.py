"""Schemathesis beyond the positive public cases (those are in test_schema_fuzz.py): schema-breaking cases for
every public operation, and the admin API with its token (both ways) and without it (401). Pass criteria are
``e2e.fuzz.problem``'s: no 5xx, the OpenAI envelope, a message naming the field. Bounded for CI; the long run
is ``python -m e2e.fuzz``. Crashes it found stay here as regression tests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from schemathesis import GenerationMode

from e2e.fuzz import Tally, check_health, fuzz_admin, fuzz_public
from tests.server.conftest import ADMIN_TOKEN, API_KEY, MODEL_NAME, ServerProcess, admin

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.gemma]

EXAMPLES = 40
AUTH = {"Authorization": f"Bearer {API_KEY}"}
ADMIN_EXAMPLES = 24


def test_schema_breaking_requests_are_refused_cleanly(server: ServerProcess) -> None:
    tally = Tally()
    fuzz_public(server.url, httpx.get(f"{server.url}/openapi.json").json(), API_KEY, [GenerationMode.NEGATIVE],
                EXAMPLES, tally)  # fmt: skip
    check_health(server.url, tally)
    assert tally.problems == [], tally.summary()
    assert tally.examples >= 4 * EXAMPLES


def test_admin_api_with_and_without_its_token(server: ServerProcess) -> None:
    tally = Tally()
    fuzz_admin(server.url, httpx.get(f"{server.url}/openapi.json").json(), API_KEY, ADMIN_TOKEN, ADMIN_EXAMPLES,
               tally)  # fmt: skip
    check_health(server.url, tally)
    assert tally.problems == [], tally.summary()
    assert sum(n for key, n in tally.statuses.items() if key.endswith("expect 401 401")) >= 5


def test_budgets_beyond_any_integer_are_a_400_naming_the_field(server: ServerProcess) -> None:
    """Found by the admin fuzz: an integer past int64 reached the engine core's wire encoder (a 500)."""
    with admin(server) as a:
        response = a.put("/admin/budgets", json={"max_num_seqs": 2**101})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "max_num_seqs" and "max_num_seqs" in error["message"]


def test_budgets_outside_the_engines_bounds_name_the_field(server: ServerProcess) -> None:
    with admin(server) as a:
        response = a.put("/admin/budgets", json={"max_num_batched_tokens": 64, "max_num_seqs": 100_000})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "max_num_seqs"


def test_a_bad_query_parameter_is_named_without_its_location(server: ServerProcess) -> None:
    with admin(server) as a:
        response = a.post("/admin/drain", params={"wait_seconds": -1})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "wait_seconds" and error["message"].startswith("wait_seconds: ")


def test_an_undrain_during_a_drains_linger_keeps_the_server_admitting(server: ServerProcess) -> None:
    """Found by the admin fuzz: a lingering drain used to stop admission after its sleep even when an undrain
    had come meanwhile, so the server stayed draining with nobody asking for it."""
    import threading
    import time

    with admin(server) as a:
        lingering = threading.Thread(target=lambda: a.post("/admin/drain", params={"linger_seconds": 1.0}))
        lingering.start()
        time.sleep(0.3)
        assert a.delete("/admin/drain").status_code == 200
        lingering.join()
        assert a.get("/admin/drain").json()["draining"] is False
    assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 200


@pytest.mark.parametrize(
    "constraint",
    [{"guided_regex": "[ab]{2,5}"}, {"guided_choice": ["yes", "no"]}, {"response_format": {"type": "json_object"}}],
)
def test_min_tokens_with_structured_output_is_a_400_naming_min_tokens(
    server: ServerProcess, constraint: dict[str, Any]
) -> None:
    """Found by the long fuzz: a grammar that can end before ``min_tokens`` left the row no token it could sample
    (the stop tokens held back, everything else masked) and the request failed with a 500 (GrammarViolation)."""
    body = {"model": MODEL_NAME, "prompt": [670, 1637, 0, 5, 240], "max_tokens": 8, "min_tokens": 4, **constraint}
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "min_tokens" and "min_tokens" in error["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f"}},
                    {"type": "function", "function": {"name": "f"}},
                ]
            },
            "tools",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "1"},
                ]
            },
            "messages",
        ),
    ],
)
def test_tool_errors_name_their_field_in_the_message(server: ServerProcess, extra: dict[str, Any], param: str) -> None:
    """Found by the long fuzz: these 400s named the field in ``param`` but not in the message."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4, **extra}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and param in error["message"], error
