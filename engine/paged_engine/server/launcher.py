"""``paged-engine serve``: start the engine-core process, then the HTTP server, and tie their lives together.

The HTTP port opens at once (liveness answers, readiness says "loading") while the core loads the model.
Exit codes: 0 after a clean shutdown (SIGTERM: the port stays open for up to ``--shutdown-grace-seconds``, new
requests get 503 while in-flight ones finish; see ``server/shutdown.py``),
1 when the engine core fails to start or dies, so Kubernetes restarts the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI
from opentelemetry.trace import Tracer

from paged_engine.engine.config import EngineConfig
from paged_engine.engine.core_proc import CoreProcAddresses, run_engine_core
from paged_engine.request_limits import RequestLimits
from paged_engine.server.app import build_admin_app, build_app
from paged_engine.server.config import ServerConfig
from paged_engine.server.data_parallel import CoreEndpoint, EngineCores
from paged_engine.server.engine_client import EngineDeadError
from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.serving import Serving
from paged_engine.server.shutdown import ShutdownDrain
from paged_engine.server.state import ServerState
from paged_engine.server.timeline import RequestTimeline
from paged_engine.server.tracing import RequestSpan, configure_tracing
from paged_engine.structured_output import grammar
from paged_engine.tokenizer import load_tokenizer
from paged_engine.wire import EngineInfo

log = logging.getLogger("paged_engine.server")
LOAD_TIMEOUT_S = 1800.0


def run_server(server: ServerConfig, config: EngineConfig, model_name: str) -> int:
    """Runs the API server in this process and the engine core(s) (``config``; one per ``--data-parallel-size``)
    in spawned ones; ``model_name`` is the name clients use. Returns the process's exit code."""
    ipc_dir = Path(tempfile.mkdtemp(prefix="paged-ipc-"))
    endpoints = []
    for rank in range(config.data_parallel_size):
        addresses = CoreProcAddresses(f"ipc://{ipc_dir}/input-{rank}", f"ipc://{ipc_dir}/output-{rank}")
        core_config = dataclasses.replace(config, data_parallel_rank=rank)
        process = multiprocessing.get_context("spawn").Process(
            # not daemonic: the core starts worker processes of its own; it dies with this process (process_tree)
            target=run_engine_core, args=(core_config, addresses, server.log_level, os.getpid()),
            name=f"EngineCore-{rank}" if config.data_parallel_size > 1 else "EngineCore",
        )  # fmt: skip
        process.start()
        endpoints.append(CoreEndpoint(process, addresses.input_address, addresses.output_address))
    try:
        return asyncio.run(_serve(server, model_name, endpoints))
    finally:
        for endpoint in endpoints:
            if endpoint.process.is_alive():
                endpoint.process.kill()
        shutil.rmtree(ipc_dir, ignore_errors=True)


async def _serve(server: ServerConfig, model_name: str, endpoints: list[CoreEndpoint]) -> int:
    metrics = EngineMetrics(model_name)
    client = EngineCores(endpoints, metrics)
    state = ServerState(client, metrics, server.api_key, server.admin_token)
    public: _GracefulServer | None = None
    failed = False

    def fail() -> None:
        nonlocal failed
        failed = True
        if public is not None:
            public.should_exit = True

    client.on_death = fail
    tracer = configure_tracing(server.otel_exporter)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loader = asyncio.create_task(_load(state, server, model_name, tracer, fail))
        try:
            yield
        finally:
            loader.cancel()
            await client.close()

    public = _public_server(state, server, lifespan)
    if server.admin_port is None:
        await public.serve()
    else:
        admin = _AdminServer(uvicorn.Config(build_admin_app(state), host=server.host, port=server.admin_port,
                                            log_level=server.log_level, access_log=False, lifespan="off"))  # fmt: skip
        admin_task = asyncio.create_task(admin.serve())
        try:
            await public.serve()
        finally:
            admin.should_exit = True  # the admin port closes with the public one
            await admin_task
    return 1 if failed or client.dead else 0


async def _load(
    state: ServerState, server: ServerConfig, model_name: str, tracer: Tracer, fail: Callable[[], None]
) -> None:
    """Waits for the engine core to load the model, then builds what serving needs from its ``EngineInfo``."""
    client, metrics = state.client, state.metrics
    try:
        info = await client.wait_ready(LOAD_TIMEOUT_S)
    except EngineDeadError as exc:
        log.error("engine core failed to start: %s", exc)
        fail()
        return
    client.start()
    tokenizer = await asyncio.to_thread(load_tokenizer, info.model_path, chat_template=server.chat_template)
    # checking a request's output constraint needs the grammar library: import it now, off the event loop
    await asyncio.to_thread(grammar.load_library)

    def timeline(operation: str, request_id: str, prompt_tokens: int, max_tokens: int) -> RequestTimeline:
        span = RequestSpan(tracer, operation, model_name, request_id, max_tokens)
        return RequestTimeline(metrics, span, prompt_tokens)

    # Token ids must name a token of both the model and the tokenizer (they may differ by padding rows).
    limits = RequestLimits(min(info.vocab_size, tokenizer.vocab_size), info.max_model_len, info.max_logprobs)
    state.info, state.loras = info, list(info.loras)
    state.serving = Serving(client, tokenizer, model_name, limits, server.max_waiting_requests, timeline,
                            tool_parser=server.tool_call_parser, loras=[lora.name for lora in info.loras],
                            on_lora_request=metrics.observe_lora_request)  # fmt: skip
    metrics.observe_budgets(info.budgets.max_num_seqs, info.budgets.max_num_batched_tokens)
    metrics.observe_limits(info.limits)
    metrics.set_info(**info.info_labels())
    metrics.set_served_models([lora.name for lora in info.loras])
    _log_ready(info, server, model_name)


def _log_ready(info: EngineInfo, server: ServerConfig, model_name: str) -> None:
    log.info("ready: serving %s on http://%s:%d (%s KV blocks of %d tokens, context %d, %s on %s)", model_name,
             server.host, server.port, info.num_blocks, info.block_size, info.max_model_len, info.attention_backend,
             info.device)  # fmt: skip


def _public_server(state: ServerState, server: ServerConfig, lifespan: object) -> _GracefulServer:
    """The public port's server; its first SIGTERM drains in-flight requests before it shuts down."""
    app = build_app(state, lifespan=lifespan, max_body_bytes=server.max_request_body_bytes,
                    with_admin=server.admin_port is None, tracing=server.otel_exporter != "off")  # fmt: skip
    config = uvicorn.Config(
        app, host=server.host, port=server.port, log_level=server.log_level, access_log=server.log_level == "debug",
        timeout_graceful_shutdown=server.shutdown_grace_seconds, lifespan="on",
    )  # fmt: skip

    def start_draining() -> bool:
        if state.serving is None or state.client.dead:
            return False
        state.serving.draining = True
        return True

    drain = ShutdownDrain(server.shutdown_grace_seconds, lambda: state.client.num_in_flight, start_draining)
    return _GracefulServer(config, drain)


class _GracefulServer(uvicorn.Server):
    """The first SIGTERM drains (``ShutdownDrain``: new requests get 503 while in-flight ones finish) before
    uvicorn's own shutdown; and a pod that drained cleanly exits 0 (uvicorn would re-raise the signal)."""

    def __init__(self, config: uvicorn.Config, drain: ShutdownDrain) -> None:
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain.on_signal(sig):
            return
        if self.drain.started is not None:  # a second signal while draining: in-flight requests get 1 s more
            self.config.timeout_graceful_shutdown = 1
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if await super().on_tick(counter):
            return True
        if self.drain.done():
            self.config.timeout_graceful_shutdown = max(1, round(self.drain.remaining_s()))
            return True
        return False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _AdminServer(uvicorn.Server):
    """The admin port's server: signals are the public server's to handle (it closes this one on its way out)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
