"""The load generator: sends a dataset's requests to an OpenAI-compatible endpoint and times each SSE chunk.

Timing per request (``time.perf_counter``): TTFT from sending to the first chunk carrying choices, ITL as the
gaps between later such chunks, latency to the end of the stream. A server that packs several tokens into
one chunk shows fewer, longer ITL gaps; TPOT (from the token count) is unaffected. Token counts come from the
server's ``usage`` (``stream_options.include_usage``), else from the local tokenizer, else one per chunk.

The run is bounded by the dataset size and, optionally, by ``max_duration``: at that deadline no new request
is sent and those in flight are cancelled (reported as cancelled, not failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from paged_platform.bench.arrivals import arrival_offsets
from paged_platform.bench.datasets import BenchRequest, Tokenizer
from paged_platform.bench.sse import StreamError, parse_line
from paged_platform.bench.stats import RequestResult

Endpoint = Literal["completions", "chat"]
PATHS: dict[Endpoint, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
clock = time.perf_counter  # module attribute, so tests can replay an exact timeline


@dataclass(frozen=True)
class LoadConfig:
    base_url: str
    model: str
    endpoint: Endpoint = "completions"
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    max_duration: float | None = None
    request_timeout: float = 600.0
    api_key: str | None = None
    ignore_eos: bool = True
    seed: int = 0
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_duration is not None and not self.max_duration > 0:
            raise ValueError(f"max duration must be > 0 seconds, got {self.max_duration}")
        if not self.request_timeout > 0:
            raise ValueError(f"request timeout must be > 0 seconds, got {self.request_timeout}")
        if self.endpoint not in PATHS:
            raise ValueError(f"endpoint must be one of {sorted(PATHS)}, got {self.endpoint!r}")


@dataclass(frozen=True)
class LoadRun:
    results: list[RequestResult]
    duration: float
    cancelled: int


def request_body(config: LoadConfig, request: BenchRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": config.model,
        "max_tokens": request.output_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.ignore_eos:
        body["ignore_eos"] = True  # a common engine extension (vLLM, SGLang, paged): exact output lengths
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": request.prompt}]
    else:
        body["prompt"] = request.prompt
    return {**body, **config.extra_body}


def _output_tokens(usage: dict[str, Any] | None, text: str, chunks: int, tokenizer: Tokenizer | None) -> int:
    if usage and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"]
    if tokenizer is not None:
        return len(tokenizer.encode(text, add_special_tokens=False))
    return chunks


async def send_one(
    client: httpx.AsyncClient, config: LoadConfig, request: BenchRequest, tokenizer: Tokenizer | None = None
) -> RequestResult:
    """One streamed request, timed; every failure becomes a result with a short error category."""
    start = clock()
    ttft, last, gaps, texts, usage, chunks = 0.0, start, [], [], None, 0
    try:
        async with client.stream("POST", PATHS[config.endpoint], json=request_body(config, request)) as response:
            if response.status_code != 200:
                await response.aread()
                return RequestResult(ok=False, error=f"HTTP {response.status_code}")
            done = False
            async for line in response.aiter_lines():
                event = parse_line(line)
                if event is None:
                    continue
                if event.done:
                    done = True
                    break
                now = clock()
                usage = event.usage or usage
                if event.has_choices:
                    if chunks == 0:
                        ttft = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
                    texts.append(event.text)
            if not done:
                return RequestResult(ok=False, error="stream ended without [DONE]")
    except StreamError:
        return RequestResult(ok=False, error="error in stream")
    except httpx.TimeoutException:
        return RequestResult(ok=False, error="timeout")
    except httpx.TransportError as exc:
        return RequestResult(ok=False, error=f"transport: {type(exc).__name__}")
    latency = clock() - start
    if chunks == 0:
        return RequestResult(ok=False, error="no tokens")
    prompt_tokens = usage.get("prompt_tokens") if usage else None
    return RequestResult(
        ok=True,
        prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else request.prompt_tokens,
        output_tokens=_output_tokens(usage, "".join(texts), chunks, tokenizer),
        ttft=ttft,
        latency=latency,
        itl=tuple(gaps),
    )


def make_client(config: LoadConfig, max_connections: int) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    return httpx.AsyncClient(
        base_url=config.base_url.rstrip("/"),
        headers=headers,
        timeout=httpx.Timeout(config.request_timeout, connect=30.0),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
    )


async def run_load(
    config: LoadConfig,
    requests: Sequence[BenchRequest],
    tokenizer: Tokenizer | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
) -> LoadRun:
    """Send every request at its arrival offset (under the concurrency cap) and collect the results."""
    if not requests:
        raise ValueError("no requests to send")
    offsets = arrival_offsets(len(requests), config.request_rate, config.burstiness, config.seed)
    limit = config.max_concurrency or len(requests)
    gate = asyncio.Semaphore(limit)
    results: list[RequestResult] = []

    async with make_client(config, limit) as client:

        async def one(offset: float, request: BenchRequest) -> None:
            await asyncio.sleep(max(0.0, start + offset - clock()))
            async with gate:
                result = await send_one(client, config, request, tokenizer)
            results.append(result)
            if on_result is not None:
                on_result(result)

        start = clock()
        tasks = [asyncio.create_task(one(o, r)) for o, r in zip(offsets, requests, strict=True)]
        _, pending = await asyncio.wait(tasks, timeout=config.max_duration)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        duration = clock() - start
    return LoadRun(results, duration, cancelled=len(pending))
