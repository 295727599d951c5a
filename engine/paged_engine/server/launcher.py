"""``paged-engine serve``: start the engine-core process, then the HTTP server, and tie their lives together.

The HTTP port opens at once (liveness answers, readiness says "loading") while the core loads the model.
Exit codes: 0 after a clean shutdown (SIGTERM: the port stays open for up to ``--shutdown-grace-seconds``, new
requests get 503 while in-flight ones finish; see ``server/shutdown.py``),
1 when the engine core fails to start or dies, so Kubernetes restarts the pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI
from paged_engine.cli import served_model_name
from paged_engine.engine.config import EngineConfig
from paged_engine.engine.core_proc import CoreProcAddresses, run_engine_core
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
from paged_engine.request_limits import RequestLimits
from paged_engine.server.app import ServerState, build_admin_app, build_app
from paged_engine.server.engine_client import EngineClient, EngineDeadError
from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.serving import Serving
from paged_engine.server.shutdown import ShutdownDrain
from paged_engine.server.timeline import RequestTimeline
from paged_engine.server.tracing import RequestSpan, configure_tracing
from paged_engine.structured_output import grammar
from paged_engine.tokenizer import load_tokenizer

log = logging.getLogger("paged_engine.server")
LOAD_TIMEOUT_S = 1800.0
# paged_engine_info's labels, from the core's info(): label -> key.
INFO_LABELS = {
    "device": "device", "dtype": "dtype", "attention_backend": "attention_backend",
    "attention_fallback": "attention_fallback", "gemm_backend": "gemm_backend", "num_kv_blocks": "num_blocks",
    "block_size": "block_size", "prefill_attention": "prefill_attention", "cuda_graphs": "cuda_graphs",
    "cpu_bf16_gemm": "cpu_bf16_gemm", **{f"cpu_isa_{family}": f"cpu_isa_{family}" for family in CPU_KERNEL_FAMILIES},
}  # fmt: skip


def serve(args: argparse.Namespace, config: EngineConfig) -> int:
    """Runs the API server in this process and the engine core (``config``) in a spawned one."""
    ipc_dir = Path(tempfile.mkdtemp(prefix="paged-ipc-"))
    addresses = CoreProcAddresses(f"ipc://{ipc_dir}/input", f"ipc://{ipc_dir}/output")
    process = multiprocessing.get_context("spawn").Process(
        target=run_engine_core, args=(config, addresses, args.log_level), name="EngineCore", daemon=True
    )
    process.start()
    try:
        return asyncio.run(_serve(args, addresses, process))
    finally:
        if process.is_alive():
            process.kill()
        shutil.rmtree(ipc_dir, ignore_errors=True)


async def _serve(args: argparse.Namespace, core: CoreProcAddresses, process: multiprocessing.Process) -> int:
    tracer = configure_tracing(args.otel_exporter)
    exit_code = 0
    server: uvicorn.Server | None = None

    served_name = served_model_name(args)
    metrics = EngineMetrics(served_name)
    client = EngineClient(process, core.input_address, core.output_address, metrics.observe_step)
    state = ServerState(client, metrics, args.api_key, args.admin_token)

    def fail() -> None:
        nonlocal exit_code
        exit_code = 1
        if server is not None:
            server.should_exit = True

    client.on_death = fail

    async def load() -> None:
        try:
            info = await client.wait_ready(LOAD_TIMEOUT_S)
        except EngineDeadError as exc:
            log.error("engine core failed to start: %s", exc)
            fail()
            return
        client.start()
        tokenizer = await asyncio.to_thread(load_tokenizer, info["model_path"], chat_template=args.chat_template)
        # checking a request's output constraint needs the grammar library: import it now, off the event loop
        await asyncio.to_thread(grammar.load_library)
        state.model_info = info

        def timeline(operation: str, request_id: str, prompt_tokens: int, max_tokens: int) -> RequestTimeline:
            span = RequestSpan(tracer, operation, served_name, request_id, max_tokens)
            return RequestTimeline(metrics, span, prompt_tokens)

        # Token ids must name a token of both the model and the tokenizer (they may differ by padding rows).
        limits = RequestLimits(min(info["vocab_size"], tokenizer.vocab_size), info["max_model_len"],
                               info["max_logprobs"])  # fmt: skip
        state.serving = Serving(client, tokenizer, served_name, limits, args.max_waiting_requests, timeline,
                                tool_parser=args.tool_call_parser, loras=[lora["name"] for lora in info["loras"]],
                                on_lora_request=metrics.observe_lora_request)  # fmt: skip
        metrics.observe_budgets(info["max_num_seqs"], info["max_num_batched_tokens"])
        metrics.set_info(**{label: str(info[key]) for label, key in INFO_LABELS.items()})
        log.info("ready: serving %s on http://%s:%d (%s KV blocks of %d tokens, context %d, %s on %s)", served_name,
                 args.host, args.port, info["num_blocks"], info["block_size"], info["max_model_len"],
                 info["attention_backend"], info["device"])  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loader = asyncio.create_task(load())
        try:
            yield
        finally:
            loader.cancel()
            await client.close()

    separate_admin = args.admin_port is not None
    app = build_app(state, lifespan=lifespan, max_body_bytes=args.max_request_body_bytes,
                    with_admin=not separate_admin, tracing=args.otel_exporter != "off")  # fmt: skip
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.log_level == "debug",
        timeout_graceful_shutdown=args.shutdown_grace_seconds, lifespan="on",
    )  # fmt: skip

    def start_draining() -> bool:
        if state.serving is None or client.dead:
            return False
        state.serving.draining = True
        return True

    drain = ShutdownDrain(args.shutdown_grace_seconds, lambda: client.num_in_flight, start_draining)
    server = _GracefulServer(config, drain)
    if separate_admin:
        admin_config = uvicorn.Config(build_admin_app(state), host=args.host, port=args.admin_port,
                                      log_level=args.log_level, access_log=False, lifespan="off")  # fmt: skip
        admin = _AdminServer(admin_config)
        admin_task = asyncio.create_task(admin.serve())
        try:
            await server.serve()
        finally:
            admin.should_exit = True  # the admin port closes with the public one
            await admin_task
    else:
        await server.serve()
    if client.dead:
        exit_code = 1
    return exit_code


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
