"""What operators rely on: disconnects free KV blocks, live budgets, drain, engine death, SIGTERM, load."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.conftest import (
    ADMIN_TOKEN,
    API_KEY,
    COMMON_ARGS,
    MODEL_NAME,
    ServerProcess,
    admin,
    scrape,
    start_server,
    wait_for,
)  # fmt: skip

pytestmark = [pytest.mark.server, pytest.mark.gemma]
AUTH = {"Authorization": f"Bearer {API_KEY}"}
LONG = {"model": MODEL_NAME, "prompt": "Tell me everything.", "max_tokens": 400, "ignore_eos": True}


def test_client_disconnect_mid_stream_frees_kv_blocks(server: ServerProcess) -> None:
    with httpx.stream("POST", f"{server.url}/v1/completions", json={**LONG, "stream": True}, headers=AUTH) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
        assert scrape(server)["paged_kv_cache_usage_ratio"] > 0
    # the connection is closed here, mid-stream
    wait_for(lambda: scrape(server)["paged_kv_cache_usage_ratio"] == 0.0)
    assert scrape(server)["paged_requests_running"] == 0


def test_budgets_changed_through_admin_show_in_metrics_and_bound_steps(server: ServerProcess) -> None:
    with admin(server) as a:
        try:
            refused = a.put("/admin/budgets", json={"max_num_seqs": 10**6})
            assert refused.status_code == 400 and "max_num_seqs" in refused.json()["error"]["message"]
            assert a.put("/admin/budgets", json={"max_num_seqs": 0}).status_code == 400
            changed = a.put("/admin/budgets", json={"max_num_seqs": 2, "max_num_batched_tokens": 64})
            assert changed.status_code == 200, changed.text
            assert changed.json()["max_num_seqs"] == 2
            metrics = scrape(server)
            assert metrics["paged_scheduler_max_num_seqs"] == 2
            assert metrics["paged_scheduler_max_num_batched_tokens"] == 64

            seen_running: list[float] = []
            seen_waiting: list[float] = []
            body = {"model": MODEL_NAME, "prompt": "Count with me.", "max_tokens": 40, "ignore_eos": True}

            def send() -> None:
                httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=120).raise_for_status()

            workers = [threading.Thread(target=send) for _ in range(6)]
            for w in workers:
                w.start()
            while any(w.is_alive() for w in workers):
                m = scrape(server)
                seen_running.append(m["paged_requests_running"])
                seen_waiting.append(m["paged_requests_waiting"])
                time.sleep(0.05)
            for w in workers:
                w.join()
            assert max(seen_running) <= 2
            assert max(seen_waiting) >= 1  # the others had to wait for a seat
        finally:
            a.put("/admin/budgets", json={"max_num_seqs": 32, "max_num_batched_tokens": 2048})


def test_bounded_load_finishes_without_errors(server: ServerProcess) -> None:
    async def run() -> list[int]:
        sem = asyncio.Semaphore(32)
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120) as c:

            async def one(i: int) -> int:
                async with sem:
                    r = await c.completions.create(model=MODEL_NAME, prompt=f"Request number {i}:", max_tokens=8)
                    return r.usage.completion_tokens

            return await asyncio.gather(*(one(i) for i in range(200)))

    results = asyncio.run(run())
    assert len(results) == 200 and all(1 <= n <= 8 for n in results)
    wait_for(lambda: scrape(server)["paged_kv_cache_usage_ratio"] == 0.0)
    metrics = scrape(server)
    assert metrics["paged_requests_running"] == 0 and metrics["paged_requests_waiting"] == 0


@pytest.fixture
def own_server(tiny_gemma_dir: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    servers: list[ServerProcess] = []

    def start(*extra: str) -> ServerProcess:
        proc = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, "--admin-token", ADMIN_TOKEN, *extra)
        servers.append(proc)
        return proc

    yield start
    for proc in servers:
        proc.stop()


def test_drain_stops_admission_and_finishes_in_flight(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server()
    result: dict[str, object] = {}

    def in_flight() -> None:
        body = {"model": MODEL_NAME, "prompt": "Keep going.", "max_tokens": 150, "ignore_eos": True}
        result["response"] = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)

    worker = threading.Thread(target=in_flight)
    worker.start()
    with admin(server) as a:
        wait_for(lambda: a.get("/admin/drain").json()["in_flight"] == 1)
        state = a.post("/admin/drain").json()
        assert state["draining"] is True and state["drained"] is False
        assert httpx.get(f"{server.url}/ready").status_code == 503
        refused = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL_NAME, "prompt": "new"})
        assert refused.status_code == 503 and "Retry-After" in refused.headers
        drained = a.post("/admin/drain", params={"wait_seconds": 120}).json()
        assert drained["drained"] is True
    worker.join()
    response = result["response"]
    assert isinstance(response, httpx.Response) and response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 150
    assert httpx.get(f"{server.url}/health").status_code == 200  # draining is not dead


def test_drain_lingers_admitting_while_closing_every_connection(own_server) -> None:  # type: ignore[no-untyped-def]
    """A pod's preStop drain: during the linger requests are still served but each response closes its
    connection (keep-alive clients reconnect through the Service elsewhere); afterwards admission stops."""
    server = own_server()
    body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2}
    with admin(server) as a, httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.post("/v1/completions", json=body).headers.get("connection") != "close"
        drain = threading.Thread(target=lambda: a.post("/admin/drain", params={"linger_seconds": 3}, timeout=30))
        drain.start()
        wait_for(lambda: a.get("/admin/drain").json()["closing_connections"])
        during = c.post("/v1/completions", json=body)
        assert during.status_code == 200 and during.headers["connection"] == "close"
        assert httpx.get(f"{server.url}/ready").status_code == 503  # the pod leaves its Service at once
        drain.join()
        after = c.post("/v1/completions", json=body)
        assert after.status_code == 503 and after.headers["connection"] == "close"
        assert a.delete("/admin/drain").json() == {
            "draining": False, "in_flight": 0, "drained": False, "closing_connections": False,
        }  # fmt: skip
        assert c.post("/v1/completions", json=body).headers.get("connection") != "close"


def test_full_waiting_queue_answers_503_with_retry_after(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server("--max-num-seqs", "1", "--max-waiting-requests", "2")
    statuses: list[int] = []
    lock = threading.Lock()

    def send() -> None:
        r = httpx.post(f"{server.url}/v1/completions", json={**LONG, "max_tokens": 60}, timeout=120)
        with lock:
            statuses.append(r.status_code)
            if r.status_code == 503:
                assert r.headers.get("Retry-After")
                assert "queue" in r.json()["error"]["message"]

    workers = [threading.Thread(target=send) for _ in range(8)]
    for w in workers:
        w.start()
        time.sleep(0.05)
    for w in workers:
        w.join()
    assert statuses.count(503) >= 1
    assert statuses.count(200) >= 2  # the running one and the queued ones completed
    assert httpx.post(f"{server.url}/v1/completions", json={**LONG, "max_tokens": 2}).status_code == 200


def test_engine_core_death_fails_health_and_exits_non_zero(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server()
    os.kill(server.core_pid(), signal.SIGKILL)
    returncode = server.process.wait(60)
    assert returncode != 0
    assert "engine core process exited unexpectedly" in server.log()


def test_engine_core_death_ends_open_streams_with_an_error_event(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server()
    body = {**LONG, "max_tokens": 900, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        lines = (line for line in r.iter_lines() if line)
        assert all(next(lines).startswith("data: {") for _ in range(3))  # tokens are flowing
        os.kill(server.core_pid(), signal.SIGKILL)
        rest = list(lines)
    errors = [json.loads(line[6:])["error"] for line in rest if line.startswith('data: {"error"')]
    assert len(errors) == 1 and errors[0]["code"] == 503 and "engine" in errors[0]["message"], rest[-3:]
    assert rest[-1] == "data: [DONE]"
    assert server.process.wait(60) != 0


def test_sigterm_lets_in_flight_requests_finish_then_exits_zero(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server("--shutdown-grace-seconds", "60")
    chunks: list[str] = []

    def stream() -> None:
        body = {"model": MODEL_NAME, "prompt": "Go on.", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as r:
            chunks.extend(line for line in r.iter_lines() if line)

    worker = threading.Thread(target=stream)
    worker.start()
    wait_for(lambda: len(chunks) > 0)
    server.process.send_signal(signal.SIGTERM)
    # During the grace period the port stays open: new work is refused with 503, probes still answer.
    refused = httpx.post(f"{server.url}/v1/completions", json={**LONG, "max_tokens": 2}, timeout=30)
    assert refused.status_code == 503 and refused.headers["Retry-After"], refused.text
    assert "draining" in refused.json()["error"]["message"]
    assert httpx.get(f"{server.url}/ready").status_code == 503
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert worker.is_alive()  # the stream was still running while the new request was refused
    worker.join(120)
    assert server.process.wait(60) == 0
    assert chunks[-1] == "data: [DONE]"
    assert sum(1 for c in chunks if c.startswith("data: {")) == 300


def test_a_second_sigterm_stops_at_once(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server("--shutdown-grace-seconds", "600")
    body = {**LONG, "max_tokens": 900, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: httpx.get(f"{server.url}/ready").status_code == 503)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(60) is not None  # well within the 600 s grace period


def test_priority_policy_admits_the_most_urgent_waiting_request_first(own_server) -> None:  # type: ignore[no-untyped-def]
    server = own_server("--scheduling-policy", "priority", "--max-num-seqs", "1")
    finished: list[str] = []
    lock = threading.Lock()

    def send(name: str, priority: int, max_tokens: int) -> None:
        body = {"model": MODEL_NAME, "prompt": name, "max_tokens": max_tokens, "ignore_eos": True,
                "priority": priority}  # fmt: skip
        httpx.post(f"{server.url}/v1/completions", json=body, timeout=120).raise_for_status()
        with lock:
            finished.append(name)

    # long enough (hundreds of steps) that both late requests are queued while it runs, on any machine
    first = threading.Thread(target=send, args=("running", 5, 900))
    first.start()
    wait_for(lambda: scrape(server)["paged_requests_running"] == 1)
    late = [threading.Thread(target=send, args=("low", 10, 4)), threading.Thread(target=send, args=("urgent", 0, 4))]
    for waiting, worker in enumerate(late, start=1):
        worker.start()
        wait_for(lambda n=waiting: scrape(server)["paged_requests_waiting"] == n)
    for worker in (first, *late):
        worker.join()
    assert finished == ["running", "urgent", "low"]
