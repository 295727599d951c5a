"""Concurrent scraping against a real local HTTP server: slow, failing and garbage pods don't block the round."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
import pytest
from operator_exposition import exposition
from paged_operator.clients.metrics_source import PodScraper, PodTarget, PrometheusSource

T = TypeVar("T")


class Server:
    """A minimal HTTP/1.1 server on 127.0.0.1: routes map a path to an async handler returning (status, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, Callable] = {}
        self.queries: list[str] = []
        self.port = 0
        self.release = asyncio.Event()  # set at teardown: lets hanging handlers finish

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readuntil(b"\r\n\r\n")).decode()
            target = request.split(" ", 2)[1]
            path, _, query = target.partition("?")
            params = dict(urllib.parse.parse_qsl(query))
            if "query" in params:
                self.queries.append(params["query"])
            status, body = await self.routes[path](params)
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    listener = await asyncio.start_server(srv._handle, "127.0.0.1", 0)
    srv.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield srv
        srv.release.set()
        await asyncio.sleep(0.05)


async def bounded(awaitable: Awaitable[T], failure: str, timeout_s: float = 60.0) -> T:
    """``awaitable``'s result; a test failure saying ``failure`` if it has not finished after ``timeout_s`` (far
    beyond the timeouts under test: only a round that waits for a hung peer gets there)."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError:
        pytest.fail(f"{failure} (no result after {timeout_s:g} s)")


async def test_scrapes_concurrently_and_isolates_failures(server: Server) -> None:
    """One round asks every pod at once: the healthy pods answer only once every pod's request has arrived, so
    their samples come back only from a scraper that does not ask them one after another. The hung pod (released
    only when the test is over) is reported as a timeout, so the round ended without it; broken pods are failures,
    not errors."""
    paths = {"/a", "/b", "/slow", "/err", "/junk"}
    arrived: set[str] = set()
    everyone_asked = asyncio.Event()

    def arrive(path: str) -> None:
        arrived.add(path)
        if arrived == paths:
            everyone_asked.set()

    def healthy(path: str, **kw) -> Callable:
        async def handler(_: dict) -> tuple[int, str]:
            arrive(path)
            await everyone_asked.wait()
            return 200, exposition(**kw)

        return handler

    async def slow(_: dict) -> tuple[int, str]:
        arrive("/slow")
        await server.release.wait()  # hangs until the test is over
        return 200, exposition()

    async def broken(_: dict) -> tuple[int, str]:
        arrive("/err")
        return 500, "engine core died"

    async def garbage(_: dict) -> tuple[int, str]:
        arrive("/junk")
        return 200, "<html>not metrics</html>"

    server.routes = {"/a": healthy("/a", kv=0.5), "/b": healthy("/b", kv=0.9, waiting=3), "/slow": slow,
                     "/err": broken, "/junk": garbage}  # fmt: skip
    pods = [
        PodTarget(name, server.url(path))
        for name, path in [("a", "/a"), ("b", "/b"), ("slow", "/slow"), ("err", "/err"), ("junk", "/junk")]
    ]
    pods.append(PodTarget("down", "http://127.0.0.1:9/metrics"))  # nothing listens on the discard port
    async with httpx.AsyncClient() as client:
        scraper = PodScraper(client, timeout_s=2.0, model_name="gemma-3-270m")
        result = await bounded(scraper.collect(pods), "the round waited for the hung pod")
    assert {s.pod: s.kv_usage for s in result.samples} == {"a": 0.5, "b": 0.9}, result.failures
    assert set(result.failures) == {"slow", "err", "junk", "down"}
    assert result.failures["slow"] == "no answer within 2 s"
    assert result.failures["err"].startswith("HTTP 500")
    assert "unparseable metrics exposition" in result.failures["junk"]
    assert "ConnectError" in result.failures["down"]
    assert all(s.time <= result.time for s in result.samples)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="scrape timeout must be positive, got 0 s"):
        PodScraper(httpx.AsyncClient(), timeout_s=0)


def vector(series: list[tuple[dict[str, str], float]], ts: float = 1000.0) -> str:
    result = [{"metric": labels, "value": [ts, str(value)]} for labels, value in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


async def test_prometheus_source_builds_the_same_samples(server: Server) -> None:
    values = {
        "paged_kv_cache_usage_ratio": {"md-0": 0.8, "md-1": 0.4},
        "paged_requests_running": {"md-0": 10, "md-1": 4},
        "paged_requests_waiting": {"md-0": 2, "md-1": 0},
        "paged_preemptions_total": {"md-0": 7, "md-3": 1},  # md-1 lacks it: a failure, not a zero
    }
    values["paged_kv_cache_usage_ratio"]["md-3"] = float("nan")  # md-3 answers garbage: only md-3 fails
    values["paged_requests_running"]["md-3"] = values["paged_requests_waiting"]["md-3"] = 1

    async def query(params: dict) -> tuple[int, str]:
        promql = params["query"]
        name = promql.split("{", 1)[0]
        if name == "paged_time_to_first_token_seconds_bucket":
            return 200, vector(
                [({"__name__": name, "pod": "md-0", "le": le}, c) for le, c in (("0.1", 3), ("1", 9), ("+Inf", 10))]
            )
        per_pod = values.get(name, {})
        return 200, vector([({"__name__": name, "pod": pod, "namespace": "ml"}, v) for pod, v in per_pod.items()])

    server.routes = {"/api/v1/query": query}
    async with httpx.AsyncClient() as client:
        source = PrometheusSource(client, server.url("/"), labels={"namespace": "ml"})
        pods = [PodTarget(name, "") for name in ("md-0", "md-1", "md-2", "md-3")]
        result = await source.collect(pods)
    (sample,) = result.samples
    assert (sample.pod, sample.kv_usage, sample.waiting, sample.preemptions_total, sample.time) == (
        "md-0",
        0.8,
        2,
        7,
        1000.0,
    )
    assert sample.ttft is not None and sample.ttft.count == 10
    assert "paged_preemptions_total" in result.failures["md-1"]
    assert result.failures["md-2"] == "no series in Prometheus for this pod"
    assert result.failures["md-3"] == "pod md-3: paged_kv_cache_usage_ratio is NaN"
    assert 'paged_kv_cache_usage_ratio{namespace="ml",pod=~"md\\\\-0|md\\\\-1|md\\\\-2|md\\\\-3"}' in server.queries


async def test_prometheus_down_fails_every_pod(server: Server) -> None:
    async def error(_: dict) -> tuple[int, str]:
        return 200, json.dumps({"status": "error", "error": "bad query"})

    server.routes = {"/api/v1/query": error}
    async with httpx.AsyncClient() as client:
        result = await PrometheusSource(client, server.url(""), labels={}).collect([PodTarget("a", "")])
        assert result.samples == () and "Prometheus query failed" in result.failures["a"]
        gone = await PrometheusSource(client, "http://127.0.0.1:9", labels={}).collect([PodTarget("a", "")])
        assert "Prometheus query failed" in gone.failures["a"]


def test_prometheus_rejects_names_it_cannot_quote() -> None:
    client = httpx.AsyncClient()
    with pytest.raises(ValueError, match="invalid Prometheus label name 'name-space'"):
        PrometheusSource(client, "http://p", labels={"name-space": "x"})
    source = PrometheusSource(client, "http://p", labels={"namespace": 'we"ird'})
    assert source.selector([PodTarget("a", "")]) == '{namespace="we\\"ird",pod=~"a"}'
    with pytest.raises(ValueError, match=re.escape("pod name 'A|.*' is not a valid Kubernetes name")):
        source.selector([PodTarget("A|.*", "")])


async def test_slow_prometheus_fails_the_round_within_its_timeout(server: Server) -> None:
    async def hang(_: dict) -> tuple[int, str]:
        await server.release.wait()
        return 200, vector([])

    server.routes = {"/api/v1/query": hang}
    async with httpx.AsyncClient() as client:
        source = PrometheusSource(client, server.url(""), labels={}, timeout_s=0.3)
        result = await bounded(source.collect([PodTarget("a", "")]), "the round waited for the hung Prometheus")
    assert server.queries, "Prometheus was never asked"
    assert result.samples == () and result.failures["a"].startswith("Prometheus query failed")
    assert "Timeout" in result.failures["a"], result.failures  # it still hangs: the round gave up on it
