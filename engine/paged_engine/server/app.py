"""The FastAPI applications of the API server process: the public one (OpenAI- and Anthropic-compatible routes,
health, readiness, metrics; the admin API too unless it has its own port) and the admin port's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from contextlib import aclosing
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from paged_engine.server.admin import add_admin_routes
from paged_engine.server.anthropic import MessagesRequest, MessagesServing
from paged_engine.server.body_limit import BodySizeLimit
from paged_engine.server.connection_close import CloseConnectionsWhen
from paged_engine.server.engine_client import EngineDeadError
from paged_engine.server.errors import APIError, install_error_handlers
from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.openapi import with_model_limits
from paged_engine.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
)
from paged_engine.server.state import ServerState, bearer_guard
from paged_engine.server.tracing import TraceContext

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event_stream(chunks: AsyncGenerator[str, None], metrics: EngineMetrics) -> StreamingResponse:
    """A server-sent-events response that times each chunk's write as the step-time breakdown's ``http`` phase.

    Starlette encodes and sends a chunk before it asks for the next one, so the time between a yield and the
    generator's resumption is that write (a client that reads slowly shows up here). Closing the response closes
    ``chunks`` at once, so a disconnect still aborts the request's engine work."""

    async def timed() -> AsyncIterator[str]:
        async with aclosing(chunks):
            async for chunk in chunks:
                started = time.perf_counter()
                yield chunk
                metrics.observe_phase("http", time.perf_counter() - started)

    return StreamingResponse(timed(), media_type="text/event-stream", headers=SSE_HEADERS)


DEFAULT_MAX_BODY_BYTES = 32 << 20


def build_app(
    state: ServerState,
    lifespan: Any = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    with_admin: bool = True,
    tracing: bool = False,
) -> FastAPI:
    """The public application; ``with_admin=False`` leaves ``/admin`` out (it is then served by
    :func:`build_admin_app` on its own port). ``tracing`` makes each request's incoming trace context current
    (off, no header is parsed per request)."""
    app = FastAPI(title="paged-engine", version="0.1.0", docs_url="/docs", redoc_url=None, lifespan=lifespan)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    app.add_middleware(CloseConnectionsWhen, closing=lambda: state.closing_connections)
    if tracing:
        app.add_middleware(TraceContext)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        if state.serving is None:
            return schema  # the model's limits are not known yet: not cached
        app.openapi_schema = with_model_limits(schema, state.serving.limits, state.serving.model_name)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    _probe_routes(app, state)
    api_auth = Depends(bearer_guard(state.api_key, "API key"))
    _openai_routes(app, state, api_auth)
    _anthropic_routes(app, state, api_auth)
    if with_admin:
        add_admin_routes(app, state)
    return app


def build_admin_app(state: ServerState) -> FastAPI:
    """The admin API alone, for ``--admin-port``: kept off the port the Service exposes."""
    app = FastAPI(title="paged-engine admin", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    add_admin_routes(app, state)
    return app


def _probe_routes(app: FastAPI, state: ServerState) -> None:
    """Liveness (the engine core is alive), readiness (loaded and not draining) and the Prometheus metrics."""
    client = state.client

    @app.get("/health", include_in_schema=False)
    async def health() -> Response:
        if client.dead:
            return JSONResponse({"status": "engine core is dead"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready", include_in_schema=False)
    async def ready() -> Response:
        if client.dead:
            return JSONResponse({"ready": False, "reason": "engine core is dead"}, status_code=503)
        if state.serving is None:
            return JSONResponse({"ready": False, "reason": "loading"}, status_code=503)
        if state.serving.draining or state.closing_connections:
            return JSONResponse({"ready": False, "reason": "draining"}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _openai_routes(app: FastAPI, state: ServerState, api_auth: Any) -> None:
    metrics = state.metrics

    @app.get("/v1/models", dependencies=[api_auth])
    async def models() -> ModelList:
        serving = state.ready_serving()
        root = state.info.model if state.info is not None else None
        card = ModelCard(id=serving.model_name, root=root, max_model_len=serving.max_model_len)
        cards = [ModelCard(id=lora.name, root=lora.path, parent=serving.model_name,
                           max_model_len=serving.max_model_len) for lora in state.loras]  # fmt: skip
        return ModelList(data=[card, *cards])

    @app.post("/v1/completions", dependencies=[api_auth])
    async def completions(body: CompletionRequest, request: Request) -> Response:
        serving = state.ready_serving()
        if body.stream:
            prompts, params = serving.prepare_completion(body)
            return event_stream(serving.completion_stream(body, prompts, params), metrics)
        return await _until_disconnect(request, serving.completion(body))

    @app.post("/v1/chat/completions", dependencies=[api_auth])
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        serving = state.ready_serving()
        if body.stream:
            prompts, params = serving.prepare_chat(body)
            return event_stream(serving.chat_stream(body, prompts, params), metrics)
        return await _until_disconnect(request, serving.chat(body))

    @app.post("/tokenize", dependencies=[api_auth])
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        serving = state.ready_serving()
        serving.check_model(body.model)
        if body.messages is not None:
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            text = serving.render_chat(messages, body.add_generation_prompt, {})
            tokens = serving.tokenizer.encode(text, add_special_tokens=False)
        else:
            tokens = serving.tokenizer.encode(body.prompt or "", add_special_tokens=body.add_special_tokens)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": serving.max_model_len}

    @app.post("/detokenize", dependencies=[api_auth])
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        serving = state.ready_serving()
        serving.check_model(body.model)
        serving.check_token_ids("tokens", body.tokens)
        return {"prompt": serving.tokenizer.decode(body.tokens, skip_special_tokens=False)}


def _anthropic_routes(app: FastAPI, state: ServerState, api_auth: Any) -> None:
    @app.post("/v1/messages", dependencies=[api_auth])
    async def messages(body: MessagesRequest, request: Request) -> Response:
        anthropic = MessagesServing(state.ready_serving())
        if body.stream:
            chat, prompts, params = anthropic.prepare(body)
            return event_stream(anthropic.stream(chat, prompts, params), state.metrics)
        return await _until_disconnect(request, anthropic.message(body))


async def _until_disconnect(request: Request, work: Awaitable[dict[str, Any]]) -> Response:
    """Runs a non-streaming request, cancelling it (and so aborting its engine requests) if the client leaves."""
    task = asyncio.ensure_future(work)
    while not task.done():
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if not done and await request.is_disconnected():
            task.cancel()
            return Response(status_code=499)
    try:
        return JSONResponse(task.result())
    except EngineDeadError as exc:
        raise APIError(503, str(exc), type="unavailable_error") from None
