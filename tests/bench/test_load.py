"""The load client against in-process fake servers (httpx.MockTransport): timing on a replayed timeline,
token accounting, failures, concurrency cap and the time bound."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from paged_platform.bench import load
from paged_platform.bench.datasets import BenchRequest
from paged_platform.bench.load import LoadConfig, request_body, run_load, send_one
from paged_platform.bench.stats import summarize

REQUEST = BenchRequest("hello there", prompt_tokens=2, output_tokens=4)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def chunk(text: str | None = None, usage: dict | None = None) -> bytes:
    data: dict = {"choices": [] if text is None else [{"index": 0, "text": text}]}
    if usage is not None:
        data["usage"] = usage
    return f"data: {json.dumps(data)}\n\n".encode()


def streaming_server(
    events: list[tuple[float, bytes]], clock: FakeClock, seen: list[dict] | None = None
) -> httpx.MockTransport:
    """Each event advances the fake clock by its delay, then delivers its bytes."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))

        async def body() -> AsyncIterator[bytes]:
            for delay, data in events:
                clock.now += delay
                yield data

        return httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


async def send(transport: httpx.MockTransport, config: LoadConfig | None = None, tokenizer=None):  # type: ignore[no-untyped-def]
    config = config or LoadConfig(base_url="http://bench", model="m")
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        return await send_one(client, config, REQUEST, tokenizer)


async def test_timeline_gives_exact_ttft_itl_tpot(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(load, "clock", clock)
    seen: list[dict] = []
    events = [
        (0.25, chunk("a")),  # first token at 250 ms
        (0.05, chunk("")),  # an empty-text token step still counts as a chunk
        (0.10, chunk("b") + chunk("c")),  # two chunks in one network read: second gap is 0
        (0.00, chunk(usage={"prompt_tokens": 7, "completion_tokens": 4})),
        (0.02, b"data: [DONE]\n\n"),
    ]
    result = await send(streaming_server(events, clock, seen))
    assert result.ok, result.error
    assert result.ttft == pytest.approx(0.25)
    assert result.itl == pytest.approx((0.05, 0.10, 0.0))
    assert result.latency == pytest.approx(0.42)
    assert (result.prompt_tokens, result.output_tokens) == (7, 4)
    assert result.tpot == pytest.approx((0.42 - 0.25) / 3)
    body = seen[0]
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 4 and body["ignore_eos"] is True and body["prompt"] == "hello there"


async def test_token_counts_without_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "clock", FakeClock())
    events = [(0.0, chunk("ab")), (0.0, chunk("cd")), (0.0, b"data: [DONE]\n\n")]
    result = await send(streaming_server(events, FakeClock()))
    assert (result.prompt_tokens, result.output_tokens) == (2, 2)  # dataset's prompt count, one token per chunk

    class CharTokenizer:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            return [ord(c) for c in text]

        def decode(self, ids, skip_special_tokens: bool = True) -> str:  # type: ignore[no-untyped-def]
            return "".join(map(chr, ids))

    result = await send(streaming_server(events, FakeClock()), tokenizer=CharTokenizer())
    assert result.output_tokens == 4


def test_chat_body_and_extra_fields() -> None:
    config = LoadConfig(base_url="http://x", model="m", endpoint="chat", ignore_eos=False, extra_body={"top_k": 1})
    body = request_body(config, REQUEST)
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert "prompt" not in body and "ignore_eos" not in body and body["top_k"] == 1


@pytest.mark.parametrize(
    ("respond", "error"),
    [
        (lambda r: httpx.Response(503, json={"error": {"message": "busy"}}), "HTTP 503"),
        (lambda r: httpx.Response(200, content=chunk("a")), "stream ended without [DONE]"),
        (lambda r: httpx.Response(200, content=b"data: [DONE]\n\n"), "no tokens"),
        (lambda r: httpx.Response(200, content=b'data: {"error": {"message": "boom"}}\n\n'), "error in stream"),
        (lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")), "transport: ConnectError"),
        (lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow")), "timeout"),
    ],
)
async def test_failures_become_error_categories(respond: Callable, error: str) -> None:
    result = await send(httpx.MockTransport(respond))
    assert not result.ok and result.error == error


def test_config_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError, match="max concurrency must be >= 1, got 0"):
        LoadConfig(base_url="x", model="m", max_concurrency=0)
    with pytest.raises(ValueError, match="max duration must be > 0 seconds, got -1"):
        LoadConfig(base_url="x", model="m", max_duration=-1)
    with pytest.raises(ValueError, match="endpoint must be one of"):
        LoadConfig(base_url="x", model="m", endpoint="embeddings")  # type: ignore[arg-type]


def slow_server(delay: float, state: dict[str, int]) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await asyncio.sleep(delay)
        finally:
            state["in_flight"] -= 1
        return httpx.Response(200, content=chunk("x") + b"data: [DONE]\n\n")

    return httpx.MockTransport(handler)


async def test_run_respects_concurrency_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"in_flight": 0, "peak": 0}
    transport = slow_server(0.02, state)
    real = load.make_client
    monkeypatch.setattr(load, "make_client", lambda c, n: _with_transport(real(c, n), transport))
    done: list = []
    config = LoadConfig(base_url="http://bench", model="m", max_concurrency=3)
    run = await run_load(config, [REQUEST] * 10, on_result=done.append)
    assert len(run.results) == 10 and len(done) == 10 and run.cancelled == 0
    assert all(r.ok for r in run.results)
    assert state["peak"] == 3
    assert summarize(run.results, run.duration).completed == 10


async def test_run_stops_at_the_time_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"in_flight": 0, "peak": 0}
    transport = slow_server(30.0, state)
    real = load.make_client
    monkeypatch.setattr(load, "make_client", lambda c, n: _with_transport(real(c, n), transport))
    config = LoadConfig(base_url="http://bench", model="m", max_concurrency=2, max_duration=0.2)
    run = await run_load(config, [REQUEST] * 5)
    # The server holds every request for 30 s: none finished, so the bound ended the run, not the requests.
    assert run.results == [] and run.cancelled == 5
    assert state["in_flight"] == 0  # the cancelled requests were really abandoned


def _with_transport(client: httpx.AsyncClient, transport: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, base_url=client.base_url, headers=client.headers)
