"""Engine readiness probes and budget pushes: every failure becomes a value, never an exception (no cluster)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from operator_exposition import budgets_answer
from paged_operator.clients.engine_admin import EngineAdmin, EnginePod, engine_pod
from paged_platform.engine_contract.budgets import Budgets

PODS = [EnginePod("a", "http://127.1.0.1:8000"), EnginePod("b", "http://127.1.0.2:8000")]


def admin_with(handler, timeout_s: float = 0.5) -> tuple[EngineAdmin, httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return EngineAdmin(client, timeout_s=timeout_s), client


def test_engine_pod_url_from_the_pod_ip() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"podIP": "127.1.0.9"}}
    assert engine_pod(pod, 8000) == EnginePod("p", "http://127.1.0.9:8000")
    assert engine_pod({"metadata": {"name": "q"}, "status": {"podIP": "fd00::1"}}, 80).base_url == "http://[fd00::1]:80"
    assert PODS[0].metrics_target.url == "http://127.1.0.1:8000/metrics"


async def test_serving_splits_ready_from_loading_and_unreachable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "127.1.0.2":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200)

    admin, client = admin_with(handler)
    async with client:
        ready, why = await admin.serving(PODS)
    assert ready == [PODS[0]] and "ConnectError" in why["b"]

    admin, client = admin_with(lambda request: httpx.Response(503))
    async with client:
        ready, why = await admin.serving(PODS)
    assert ready == [] and why == {"a": "/ready answered HTTP 503", "b": "/ready answered HTTP 503"}


async def test_a_slow_pod_times_out_without_holding_up_the_others() -> None:
    """Both pods are asked at once (the fast one answers only once the hung one has been asked too), and the
    round ends with the hung pod, which never answers, reported as a timeout."""
    asked: set[str] = set()
    both_asked, never = asyncio.Event(), asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        asked.add(request.url.host)
        if len(asked) == len(PODS):
            both_asked.set()
        await (never if request.url.host == "127.1.0.2" else both_asked).wait()
        return httpx.Response(200)

    admin, client = admin_with(handler, timeout_s=1.0)
    async with client:
        try:
            ready, why = await asyncio.wait_for(admin.serving(PODS), 60)
        except TimeoutError:
            pytest.fail("serving() waited for the pod that never answers")
    assert ready == [PODS[0]] and why == {"b": "/ready gave no answer within 1 s"}


async def test_push_budgets_sends_the_admin_token_and_reports_refusals() -> None:
    seen: list[tuple[str, dict, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, json.loads(request.content), request.headers["Authorization"]))
        if request.url.host == "127.1.0.2":
            error = {"message": "max_num_seqs must be in [1, 16], got 24", "type": "invalid_request_error",
                     "param": "max_num_seqs", "code": None}  # fmt: skip
            return httpx.Response(400, json={"error": error})
        if request.url.host == "127.1.0.3":
            return httpx.Response(200, text="not the contract's answer")
        return httpx.Response(200, json=budgets_answer(request.content))

    admin, client = admin_with(handler)
    async with client:
        failed = await admin.push_budgets([*PODS, EnginePod("c", "http://127.1.0.3:8000")], Budgets(24, 1024),
                                          "secret-token")  # fmt: skip
    assert {host for host, _, _ in seen} == {"127.1.0.1", "127.1.0.2", "127.1.0.3"}
    assert all(body == {"max_num_seqs": 24, "max_num_batched_tokens": 1024} for _, body, _ in seen)
    assert all(auth == "Bearer secret-token" for _, _, auth in seen)
    assert failed["b"] == "HTTP 400: max_num_seqs must be in [1, 16], got 24 (param max_num_seqs)"
    assert failed["c"].startswith("unreadable answer") and set(failed) == {"b", "c"}


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive, got 0 s"):
        EngineAdmin(httpx.AsyncClient(), timeout_s=0)
