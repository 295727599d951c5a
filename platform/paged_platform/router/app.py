"""The router's HTTP front (Starlette): the engine routes it relays (``endpoints.RELAYED``), ``/v1/models``
merged across replicas, its own probes and metrics, and ``/router/replicas`` (what it knows of each replica, for
operators).

Which model names exist: those the replicas serve now (adapters included) plus those declared with
``--served-model`` (what the ModelDeployment will serve once a replica is up). A request for any other name is a
404 at once, listing them; one for a declared name waits for a replica even while none runs (a scale from zero).
With no replica known and nothing declared the router cannot tell, and the request waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from paged_platform.router.endpoints import BY_PATH, RELAYED, Endpoint
from paged_platform.router.errors import RouterError, bad_request, error_response
from paged_platform.router.metrics import RouterMetrics
from paged_platform.router.policies import RouteRequest
from paged_platform.router.pool import ReplicaPool
from paged_platform.router.prompt import chunk_hashes, routing_text
from paged_platform.router.proxy import forwarded_headers, open_upstream, relay, response_headers
from paged_platform.router.tracing import RouteSpan

log = logging.getLogger("paged_router")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 16 * 1024 * 1024
    max_retries: int = 2
    prefix_chunk_chars: int = 64
    #: Chunks hashed per request at most (64 chars x 1024 = the first 64 KiB of the prompt).
    prefix_max_chunks: int = 1024
    session_header: str = "x-session-id"


class Router:
    """The route handlers; the pool and upstream session are attached when the app starts (its lifespan)."""

    pool: ReplicaPool
    session: aiohttp.ClientSession

    def __init__(
        self,
        metrics: RouterMetrics,
        limits: Limits,
        tracer: trace.Tracer | None = None,
        served_models: tuple[str, ...] = (),
    ) -> None:
        self.metrics = metrics
        self.limits = limits
        self.tracer = tracer or trace.NoOpTracer()
        #: The declared model names, the base model first (``--served-model``).
        self.served_models = served_models

    def attach(self, pool: ReplicaPool, session: aiohttp.ClientSession) -> None:
        self.pool = pool
        self.session = session

    async def _read_body(self, request: Request) -> bytes:
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RouterError(413, f"request body is over {limit} bytes", type="invalid_request_error",
                              reason="bad_request")  # fmt: skip
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RouterError(413, f"request body is over {limit} bytes", type="invalid_request_error",
                                  reason="bad_request")  # fmt: skip
            chunks.append(chunk)
        return b"".join(chunks)

    def _model(self, parsed: dict[str, Any], endpoint: Endpoint) -> str:
        """The request's model, checked against the known names; the base model where the route allows none."""
        model = parsed.get("model")
        if model is None and not endpoint.model_required:
            return self._base_model()
        if not isinstance(model, str) or not model:
            raise bad_request("model: a model name (string) is required", "model")
        known = self.pool.models() | frozenset(self.served_models)
        if known and model not in known:
            raise RouterError(404, f"the model {model!r} does not exist; served: {', '.join(sorted(known))}",
                              type="not_found_error", reason="unknown_model", param="model")  # fmt: skip
        return model

    def _base_model(self) -> str:
        """Where a request without a model goes: a replica's base model, else the first declared name."""
        bases = self.pool.base_models()
        if bases:
            return min(bases)
        if self.served_models:
            return self.served_models[0]
        raise bad_request("model: no replica has reported its model yet; name the model", "model")

    def _route_request(self, body: bytes, request: Request, endpoint: Endpoint) -> RouteRequest:
        try:
            parsed = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise bad_request("request body must be a JSON object")
        model = self._model(parsed, endpoint)
        limits = self.limits
        text = routing_text(parsed) if endpoint.routes_on_prompt else ""
        return RouteRequest(
            model=model,
            chunks=chunk_hashes(text, limits.prefix_chunk_chars, limits.prefix_max_chunks),
            chunk_chars=limits.prefix_chunk_chars,
            session=request.headers.get(limits.session_header),
        )

    async def relay_post(self, request: Request) -> Response:
        endpoint = BY_PATH[request.url.path]
        model = "unknown"
        arrived = time.monotonic()
        cold = not any(r.ready for r in self.pool.replicas.values())  # held until a fleet at zero wakes
        span = RouteSpan(self.tracer, request.method, request.url.path, request.headers)
        try:
            body = await self._read_body(request)
            route = self._route_request(body, request, endpoint)
            model = route.model
            span.model(model)
            self.metrics.arrivals.labels(model).inc()
            upstream = await _unless_client_leaves(request, open_upstream(
                self.pool, self.session, self.metrics, route, request.url.path, body,
                span.upstream_headers(forwarded_headers(request.headers)), self.limits.max_retries,
            ))  # fmt: skip
        except RouterError as exc:
            if model == "unknown":
                self.metrics.arrivals.labels(model).inc()  # refused before its model was known: still an arrival
            self.metrics.rejected.labels(model, exc.reason).inc()
            span.refused(exc.status, exc.reason, exc.message)
            span.end()
            return exc.response(endpoint.anthropic)
        except ClientGoneError:
            self.metrics.rejected.labels(model, "client_gone").inc()
            span.refused(499, "client_gone", "the client disconnected before the response started")
            span.end()
            return Response(status_code=499)
        except BaseException:
            span.end()
            raise
        lease = upstream.lease
        self.metrics.prefix_queries.labels(model).inc(len(route.chunks))
        self.metrics.prefix_hits.labels(model).inc(lease.decision.matched_chunks)
        hit = lease.decision.matched_chunks / len(route.chunks) if route.chunks else None
        span.routed(replica=lease.url, policy=self.pool.policy.name, reason=lease.decision.reason,
                    retries=upstream.retries, queue_s=lease.queued_s, prefix_hit=hit)  # fmt: skip
        span.responded(upstream.response.status)
        chunks = relay(upstream, self.pool, self.metrics, span, endpoint.anthropic)
        if cold:
            chunks = _timing_first_chunk(chunks, arrived, self.metrics.cold_starts.labels(model), model)
        return StreamingResponse(
            chunks,
            status_code=upstream.response.status,
            headers=response_headers(upstream.response.headers),
        )

    async def models(self, request: Request) -> Response:
        """Every ready replica's ``/v1/models`` (with the client's credentials), merged by model id."""
        headers = forwarded_headers(request.headers)
        ready = [r.url for r in self.pool.replicas.values() if r.ready]
        if not ready:
            return error_response(503, "no replica is ready", "unavailable_error", retry_after=1)

        async def fetch(url: str) -> tuple[int, bytes]:
            try:
                async with self.session.get(f"{url}/v1/models", headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=10)) as response:  # fmt: skip
                    return response.status, await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                return 503, str(exc).encode()

        answers = await asyncio.gather(*(fetch(url) for url in ready))
        cards: dict[str, Any] = {}
        for status, payload in answers:
            if status == 200:
                for card in msgspec.json.decode(payload).get("data", []):
                    cards.setdefault(card["id"], card)
        if not cards:
            status, payload = answers[0]  # e.g. the engines' 401 for a wrong API key
            if status == 503:
                return error_response(503, f"no replica answered /v1/models: {payload.decode()[:200]}",
                                      "unavailable_error", retry_after=1)  # fmt: skip
            return Response(payload, status, media_type="application/json")
        return JSONResponse({"object": "list", "data": list(cards.values())})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """Ready once started, with or without ready replicas: with none the router queues (and so holds)
        requests until one is ready or the queue timeout passes."""
        replicas = self.pool.replicas.values()
        return JSONResponse(
            {"ready": True, "replicas": len(replicas), "ready_replicas": sum(r.ready for r in replicas)}
        )

    async def prometheus(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def replicas(self, request: Request) -> Response:
        states = [asdict(r) | {"models": sorted(r.models), "base_models": sorted(r.base_models)}
                  for r in self.pool.replicas.values()]  # fmt: skip
        queues = {model: len(queue) for model, queue in self.pool.queues.items()}
        return JSONResponse({"policy": self.pool.policy.name, "replicas": states, "queued": queues})


async def _timing_first_chunk(
    chunks: AsyncIterator[bytes], arrived: float, histogram: Histogram, model: str
) -> AsyncIterator[bytes]:
    """``chunks``, observing the time from ``arrived`` to the first one (a cold start's time to first byte)."""
    first = True
    async for chunk in chunks:
        if first:
            first = False
            waited = time.monotonic() - arrived
            histogram.observe(waited)
            log.info("cold start for %s: first byte %.2f s after the request arrived with no ready replica", model,
                     waited)  # fmt: skip
        yield chunk


class ClientGoneError(Exception):
    """The client disconnected before the response started."""


async def _unless_client_leaves(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """``work``, cancelled if the client disconnects first: until a replica sends its status line (for a
    non-streamed completion, when the whole answer is ready) nothing else notices a client leaving, and the
    cancellation closes the upstream connection, so the engine aborts the request or a queued one leaves."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task not in done:
        raise ClientGoneError
    return task.result()


def build_app(router: Router, lifespan: Any = None) -> Starlette:
    routes = [
        *(Route(endpoint.path, router.relay_post, methods=["POST"]) for endpoint in RELAYED),
        Route("/v1/models", router.models, methods=["GET"]),
        Route("/health", router.health, methods=["GET"]),
        Route("/ready", router.ready, methods=["GET"]),
        Route("/metrics", router.prometheus, methods=["GET"]),
        Route("/router/replicas", router.replicas, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
