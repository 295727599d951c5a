"""The router against fake replicas: pass-through, retries, draining, a replica dying mid-stream, the queue's
bounds, holding requests while no replica is ready, and client disconnects reaching the replica."""

from __future__ import annotations

import json
import threading

import httpx

from tests.router.conftest import FAKE_MODEL, control, replica_states, seen, wait_until
from tests.server.conftest import free_port


def complete(router, stream: bool = False, max_tokens: int = 2, **kw) -> httpx.Response:  # type: ignore[no-untyped-def]
    body = {"model": FAKE_MODEL, "prompt": "hello", "max_tokens": max_tokens, "stream": stream}
    return httpx.post(f"{router.url}/v1/completions", json=body, **{"timeout": 30, **kw})


def text_of(response: httpx.Response) -> str:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        return "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]")
    return response.json()["choices"][0]["text"]


def router_metric(router, name: str) -> float:  # type: ignore[no-untyped-def]
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{router.url}/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_streams_and_plain_responses_pass_through_with_credentials_and_trace_context(fakes, router):
    (a,) = fakes(1)
    r = router([a.url])
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = {"traceparent": traceparent, "authorization": "Bearer k"}
    streamed = complete(r, stream=True, headers=headers)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.rstrip().endswith("data: [DONE]")
    assert text_of(streamed) == "a"
    assert seen(a)["traceparent"] == traceparent
    assert seen(a)["authorization"] == "Bearer k"
    assert text_of(complete(r)) == "a"


def test_models_are_merged_across_replicas(fakes, router):
    a, b = fakes(2)
    r = router([a.url, b.url])
    models = httpx.get(f"{r.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [FAKE_MODEL]


def test_bad_input_gets_an_openai_error_naming_the_problem(fakes, router):
    (a,) = fakes(1)
    r = router([a.url], "--max-body-bytes", "1000")
    cases = [
        (b"not json", 400, "not valid JSON"),
        (b"[1]", 400, "JSON object"),
        (json.dumps({"prompt": "x"}).encode(), 400, "model"),
        (json.dumps({"model": "other", "prompt": "x"}).encode(), 404, "does not exist"),
        (json.dumps({"model": FAKE_MODEL, "prompt": "x" * 2000}).encode(), 413, "over 1000 bytes"),
    ]
    for body, status, message in cases:
        response = httpx.post(f"{r.url}/v1/completions", content=body, timeout=10)
        assert response.status_code == status, body
        error = response.json()["error"]
        assert message in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
    assert seen(a)["requests"] == 0


def test_a_refusing_replica_is_retried_elsewhere_before_the_first_byte(fakes, router):
    a, b = fakes(2)
    r = router([a.url, b.url], "--policy", "round_robin")
    control(a, status=503)
    assert {text_of(complete(r)) for _ in range(4)} == {"b"}
    assert router_metric(r, "paged_router_retries_total") >= 1


def test_an_unreachable_endpoint_is_retried_elsewhere(fakes, router):
    (a,) = fakes(1)
    dead = f"http://127.0.0.1:{free_port()}"
    r = router([dead, a.url], "--policy", "round_robin")
    assert all(complete(r).status_code == 200 for _ in range(4))
    assert replica_states(r)[dead]["ready"] is False


def test_all_replicas_refusing_relays_the_engines_503(fakes, router):
    a, b = fakes(2)
    r = router([a.url, b.url])
    control(a, status=503)
    control(b, status=503)
    response = complete(r)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "unavailable_error"


def test_a_draining_replica_gets_no_new_requests(fakes, router):
    a, b = fakes(2)
    r = router([a.url, b.url], "--policy", "round_robin")
    control(a, draining=True)
    wait_until(lambda: not replica_states(r)[a.url]["ready"])
    before = seen(a)["requests"]
    assert {text_of(complete(r)) for _ in range(6)} == {"b"}
    assert seen(a)["requests"] == before
    assert replica_states(r)[a.url]["reason"] == "draining"


def test_a_replica_dying_mid_stream_ends_the_stream_with_an_error_and_new_requests_go_elsewhere(fakes, router):
    a, b = fakes(2)
    r = router([a.url, b.url], "--policy", "round_robin")
    control(a, die_after_chunks=2, chunk_delay=0.05)
    errors = []
    for _ in range(2):  # round robin: one of the two goes to a
        response = complete(r, stream=True, max_tokens=6)
        assert response.status_code == 200
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        errors += [json.loads(e)["error"] for e in events if e != "[DONE]" and "error" in json.loads(e)]
    assert len(errors) == 1
    assert "failed mid-stream" in errors[0]["message"]
    assert set(errors[0]) == {"message", "type", "param", "code"}
    assert {text_of(complete(r)) for _ in range(4)} == {"b"}
    assert router_metric(r, "paged_router_stream_errors_total") == 1


def _in_background(fn):  # type: ignore[no-untyped-def]
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, result


def test_a_full_queue_answers_429_and_a_long_wait_503_with_retry_after(fakes, router):
    (a,) = fakes(1)
    r = router([a.url], "--max-inflight-per-replica", "1", "--max-queue", "1", "--queue-timeout", "1.5")
    control(a, chunk_delay=0.5)
    busy, busy_result = _in_background(lambda: complete(r, stream=True, max_tokens=8))  # holds the slot ~4 s
    wait_until(lambda: replica_states(r)[a.url]["in_flight"] == 1)
    queued, queued_result = _in_background(lambda: complete(r))
    wait_until(lambda: httpx.get(f"{r.url}/router/replicas").json()["queued"].get(FAKE_MODEL) == 1)
    full = complete(r)
    assert full.status_code == 429
    assert full.headers["retry-after"] == "1"
    assert full.json()["error"]["type"] == "rate_limit_error"
    queued.join(10)
    timed_out = queued_result["value"]
    assert timed_out.status_code == 503
    assert timed_out.headers["retry-after"] == "1"
    assert "within 1.5 s" in timed_out.json()["error"]["message"]
    busy.join(10)
    assert busy_result["value"].status_code == 200
    assert router_metric(r, "paged_router_rejected_requests_total") == 2


def test_requests_are_held_while_no_replica_is_ready_and_served_when_one_is(fakes, router):
    (a,) = fakes(1)
    control(a, draining=True)
    r = router([a.url], "--queue-timeout", "20")
    held, result = _in_background(lambda: complete(r))
    wait_until(lambda: httpx.get(f"{r.url}/router/replicas").json()["queued"].get(FAKE_MODEL) == 1)
    assert router_metric(r, "paged_router_queue_depth") == 1  # the demand a fleet at zero wakes on
    assert router_metric(r, "paged_router_arrivals_total") == 1
    control(a, draining=False)
    held.join(20)
    assert result["value"].status_code == 200
    assert text_of(result["value"]) == "a"
    # The cold start is reported (time to its first byte); a request to a ready replica is not a cold start.
    assert router_metric(r, "paged_router_cold_start_seconds_count") == 1
    assert router_metric(r, "paged_router_cold_start_seconds_sum") > 0
    assert complete(r).status_code == 200
    assert router_metric(r, "paged_router_cold_start_seconds_count") == 1
    assert router_metric(r, "paged_router_arrivals_total") == 2 and router_metric(r, "paged_router_queue_depth") == 0


def test_a_client_leaving_mid_stream_closes_the_replicas_stream(fakes, router):
    (a,) = fakes(1)
    r = router([a.url])
    control(a, chunk_delay=0.2)
    body = {"model": FAKE_MODEL, "prompt": "hello", "max_tokens": 50, "stream": True}
    with httpx.stream("POST", f"{r.url}/v1/completions", json=body, timeout=30) as response:
        first = next(response.iter_lines())
        assert first.startswith("data: ")
    wait_until(lambda: seen(a)["client_gone"] == 1)
    wait_until(lambda: replica_states(r)[a.url]["in_flight"] == 0)


def test_a_client_leaving_before_the_response_starts_frees_its_place(fakes, router):
    """A non-streamed completion sends nothing until it is done, and a queued request nothing at all: the router
    must notice the client leaving by itself, close the upstream request and free the replica's room."""
    (a,) = fakes(1)
    r = router([a.url], "--max-inflight-per-replica", "1", "--queue-timeout", "60")
    control(a, chunk_delay=2.0)  # a plain completion of 10 tokens answers after 20 s

    def leaves_early() -> str:
        try:
            complete(r, max_tokens=10, timeout=1.5)
        except httpx.TimeoutException:
            return "left"
        return "answered"

    clients = [_in_background(leaves_early) for _ in range(2)]  # one occupies the replica, one waits in the queue
    wait_until(lambda: httpx.get(f"{r.url}/router/replicas").json()["queued"].get(FAKE_MODEL) == 1)
    for thread, result in clients:
        thread.join(10)
        assert result["value"] == "left"
    wait_until(lambda: replica_states(r)[a.url]["in_flight"] == 0, timeout=10)
    assert httpx.get(f"{r.url}/router/replicas").json()["queued"].get(FAKE_MODEL) == 0
    assert router_metric(r, "paged_router_rejected_requests_total") == 2
