"""The FastAPI application: OpenAI-compatible routes, health, metrics and the admin API."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from paged_engine.server.anthropic import MessagesRequest, MessagesServing
from paged_engine.server.body_limit import BodySizeLimit
from paged_engine.server.connection_close import CloseConnectionsWhen
from paged_engine.server.engine_client import ControlError, EngineClient, EngineDeadError
from paged_engine.server.errors import ANTHROPIC_PATHS, APIError, bad_request, install_error_handlers
from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.openapi import with_model_limits
from paged_engine.server.protocol import (
    SAFE_INT,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
)
from paged_engine.server.serving import Serving
from paged_engine.server.tracing import TraceContext
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

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


class LoraLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, description="the model name clients will use")
    path: str = Field(min_length=1, max_length=4096, description="a PEFT adapter folder on the engine's disk")


class BudgetUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_num_seqs: int | None = Field(None, ge=1, le=SAFE_INT[1])  # the core's own bounds are checked there
    max_num_batched_tokens: int | None = Field(None, ge=1, le=SAFE_INT[1])


def _bearer_guard(token: str | None, what: str) -> Callable[[Request], Awaitable[None]]:
    async def guard(request: Request) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not given and request.url.path in ANTHROPIC_PATHS:
            given = request.headers.get("x-api-key", "")  # how Anthropic's clients send the key
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise APIError(401, f"missing or invalid {what} (send 'Authorization: Bearer <{what}>')",
                           type="authentication_error")  # fmt: skip

    return guard


class ServerState:
    """What the routes share. ``serving`` is None while the model loads: the port is open (liveness answers)
    but ``/ready`` is false and API calls get 503."""

    def __init__(self, client: EngineClient, metrics: EngineMetrics, api_key: str | None, admin_token: str | None):
        self.client = client
        self.metrics = metrics
        self.api_key = api_key
        self.admin_token = admin_token
        self.serving: Serving | None = None
        self.model_info: dict[str, Any] = {}
        #: Set when a drain begins (the pod is leaving): responses then close their connections
        #: (``connection_close``), so keep-alive clients reconnect through the Service to another replica.
        self.closing_connections = False
        #: Counts drain and undrain calls, so a drain still lingering when an undrain came does not stop admission.
        self.drain_calls = 0

    def ready_serving(self) -> Serving:
        if self.serving is None:
            if self.client.dead:
                raise APIError(503, "the engine is not running", type="unavailable_error")
            raise APIError(503, "the model is still loading", type="unavailable_error", headers={"Retry-After": "5"})
        return self.serving


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
    client, metrics = state.client, state.metrics
    api_auth = Depends(_bearer_guard(state.api_key, "API key"))

    # ---- probes and metrics ----

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
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ---- OpenAI-compatible API ----

    @app.get("/v1/models", dependencies=[api_auth])
    async def models() -> ModelList:
        serving = state.ready_serving()
        card = ModelCard(id=serving.model_name, root=state.model_info.get("model"), max_model_len=serving.max_model_len)
        adapters = state.model_info.get("loras", [])
        cards = [ModelCard(id=lora["name"], root=lora["path"], parent=serving.model_name,
                           max_model_len=serving.max_model_len) for lora in adapters]  # fmt: skip
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

    # ---- Anthropic Messages API ----

    @app.post("/v1/messages", dependencies=[api_auth])
    async def messages(body: MessagesRequest, request: Request) -> Response:
        anthropic = MessagesServing(state.ready_serving())
        if body.stream:
            chat, prompts, params = anthropic.prepare(body)
            return event_stream(anthropic.stream(chat, prompts, params), metrics)
        return await _until_disconnect(request, anthropic.message(body))

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

    if with_admin:
        add_admin_routes(app, state)
    return app


def build_admin_app(state: ServerState) -> FastAPI:
    """The admin API alone, for ``--admin-port``: kept off the port the Service exposes."""
    app = FastAPI(title="paged-engine admin", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    add_admin_routes(app, state)
    return app


def add_admin_routes(app: FastAPI, state: ServerState) -> None:
    """``/admin``: live budgets and drain, behind the admin token."""
    client, metrics = state.client, state.metrics
    admin_auth = Depends(_bearer_guard(state.admin_token, "admin token"))

    async def budgets() -> dict[str, Any]:
        try:
            result = await client.call("get_budgets")
        except EngineDeadError as exc:
            raise APIError(503, str(exc), type="unavailable_error") from None
        metrics.observe_budgets(result["max_num_seqs"], result["max_num_batched_tokens"])
        return result

    @app.get("/admin/budgets", dependencies=[admin_auth])
    async def get_budgets() -> dict[str, Any]:
        return await budgets()

    @app.put("/admin/budgets", dependencies=[admin_auth])
    async def set_budgets(update: Annotated[BudgetUpdate, Body()]) -> dict[str, Any]:
        changes = update.model_dump(exclude_none=True)
        if not changes:
            raise bad_request("give max_num_seqs and/or max_num_batched_tokens")
        try:
            await client.call("set_budgets", **changes)
        except ControlError as exc:  # the core's bounds: its message starts with the field's name
            raise bad_request(str(exc), next((f for f in changes if str(exc).startswith(f)), None)) from None
        except EngineDeadError as exc:
            raise APIError(503, str(exc), type="unavailable_error") from None
        return await budgets()

    async def lora_call(method: str, **args: Any) -> dict[str, Any]:
        """A LoRA control call; the served model list follows the core's answer."""
        serving = state.ready_serving()
        try:
            result = await client.call(method, timeout=120.0, **args)
            info = await client.call("list_loras")
        except ControlError as exc:
            kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
            raise APIError(exc.status, str(exc), type=kind, param=exc.param) from None
        except EngineDeadError as exc:
            raise APIError(503, str(exc), type="unavailable_error") from None
        state.model_info["loras"] = info
        serving.loras = [lora["name"] for lora in info]
        return result

    @app.get("/admin/lora", dependencies=[admin_auth])
    async def list_loras() -> dict[str, Any]:
        state.ready_serving()
        return {"loras": state.model_info.get("loras", [])}

    @app.post("/admin/lora", dependencies=[admin_auth])
    async def load_lora(body: Annotated[LoraLoad, Body()]) -> dict[str, Any]:
        """Load a PEFT adapter into a free slot; it is then a model name in ``/v1/models`` and requests."""
        if body.name == state.ready_serving().model_name:
            raise APIError(409, f"adapter name {body.name!r} is the base model's name", param="name")
        return await lora_call("load_lora", name=body.name, path=body.path)

    @app.delete("/admin/lora/{name:path}", dependencies=[admin_auth])
    async def unload_lora(name: str) -> dict[str, Any]:
        return await lora_call("unload_lora", name=name)

    def drain_state() -> dict[str, Any]:
        draining = state.serving is not None and state.serving.draining
        return {"draining": draining, "in_flight": client.num_in_flight,
                "drained": draining and client.num_in_flight == 0,
                "closing_connections": state.closing_connections}  # fmt: skip

    @app.get("/admin/drain", dependencies=[admin_auth])
    async def get_drain() -> dict[str, Any]:
        return drain_state()

    @app.post("/admin/drain", dependencies=[admin_auth])
    async def drain(
        wait_seconds: Annotated[float, Query(ge=0, le=3600)] = 0.0,
        linger_seconds: Annotated[float, Query(ge=0, le=600)] = 0.0,
    ) -> dict[str, Any]:
        """Stops admitting requests (``/ready`` turns false at once); with ``wait_seconds``, returns when the
        in-flight requests have finished or the wait is over (a preStop hook uses this). From the call on, every
        response closes its connection; with ``linger_seconds`` the server first keeps admitting that long, so
        that a Service stops routing here and keep-alive clients move elsewhere before admission stops (a pod's
        preStop lingers longer than the server's keep-alive timeout: see ``connection_close``)."""
        serving = state.ready_serving()
        state.closing_connections = True
        state.drain_calls += 1
        call = state.drain_calls
        if linger_seconds and not serving.draining:
            await asyncio.sleep(linger_seconds)
            if state.drain_calls != call:  # undrained (or drained again) meanwhile: that call decides
                return drain_state()
        serving.draining = True
        deadline = time.monotonic() + wait_seconds
        while client.num_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return drain_state()

    @app.delete("/admin/drain", dependencies=[admin_auth])
    async def undrain() -> dict[str, Any]:
        state.ready_serving().draining = False
        state.closing_connections = False
        state.drain_calls += 1
        return drain_state()


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
