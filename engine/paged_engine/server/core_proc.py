"""The engine-core process: the step loop behind two ZMQ sockets, with I/O on threads of its own.

An input thread receives and decodes messages, an output thread encodes and sends step results, so the main
thread only schedules and runs the model: sending one step's outputs overlaps with computing the next.
Everything that needs text (tokenising, detokenising, stop strings) stays in the API server process.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq
from paged_engine.server import ipc

log = logging.getLogger("paged_engine.core_proc")


@dataclass
class CoreConfig:
    model: str
    dtype: str
    block_size: int
    kv_cache_memory: int | float
    max_model_len: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_caching: bool
    scheduling_policy: str
    attention_backend: str
    gemm_backend: str
    seed: int
    log_level: str
    input_address: str
    output_address: str


class _CoreLoop:
    def __init__(self, engine: Any, to_send: queue.Queue[bytes | None]) -> None:
        self.engine = engine
        self.to_send = to_send
        self.unscheduled: set[str] = set()  # requests whose first scheduling is still to be reported
        self.stopping = False

    def handle(self, message: ipc.ToCore) -> list[ipc.RequestDelta]:
        """Applies one message; returns deltas to send right away (refusals, aborts)."""
        if isinstance(message, ipc.AddRequest):
            try:
                self.engine.add_request(
                    message.request_id, message.prompt_token_ids, message.sampling_params,
                    arrival_time=message.arrival_time, priority=message.priority, cache_salt=message.cache_salt,
                )  # fmt: skip
            except ValueError as exc:  # RequestValidationError included
                return [ipc.RequestDelta(message.request_id, [], finish_reason="abort", error=str(exc))]
            self.unscheduled.add(message.request_id)
        elif isinstance(message, ipc.AbortRequests):
            self.unscheduled.difference_update(message.request_ids)
            return [_delta(out) for out in self.engine.abort_requests(message.request_ids)]
        elif isinstance(message, ipc.ControlCall):
            self.to_send.put(ipc.encode(self.control(message)))
        elif isinstance(message, ipc.Shutdown):
            self.stopping = True
        return []

    def control(self, call: ipc.ControlCall) -> ipc.ControlReply:
        try:
            if call.method == "get_budgets":
                result: Any = self.engine.budgets()
            elif call.method == "set_budgets":
                self.engine.set_budgets(**call.args)
                result = self.engine.budgets()
            elif call.method == "reset_prefix_cache":
                result = self.engine.scheduler.reset_prefix_cache()
            else:
                return ipc.ControlReply(call.call_id, error=f"unknown control method {call.method!r}")
        except (ValueError, TypeError) as exc:
            return ipc.ControlReply(call.call_id, error=str(exc))
        return ipc.ControlReply(call.call_id, result=result)

    def step(self) -> ipc.StepOutputs:
        outputs = self.engine.step()
        now = time.time()
        deltas = [_delta(out) for out in outputs]
        if self.unscheduled:
            started = {rid for rid in self.unscheduled if self.engine.is_started(rid)}
            reported = {d.request_id for d in deltas}
            for d in deltas:
                if d.request_id in started or _parent(d.request_id) in started:
                    d.first_scheduled_time = now
            deltas += [ipc.RequestDelta(rid, [], first_scheduled_time=now) for rid in started - reported]
            self.unscheduled -= started
        return ipc.StepOutputs(deltas, self.engine.step_stats())


def _parent(request_id: str) -> str:
    return request_id.rsplit("-", 1)[0]


def _delta(out: Any) -> ipc.RequestDelta:
    def lp(entry: Any) -> ipc.TokenLogprobs | None:
        return None if entry is None else ipc.TokenLogprobs(entry.token_ids, entry.logprobs, entry.ranks)

    return ipc.RequestDelta(
        out.req_id,
        list(out.new_token_ids),
        finish_reason=None if out.finish_reason is None else str(out.finish_reason),
        stop_reason=out.stop_token_id,
        num_cached_tokens=max(0, out.num_cached_tokens),
        logprobs=[lp(e) for e in out.logprobs] or None,
        prompt_logprobs=[lp(e) for e in out.prompt_logprobs] or None,
        error=out.error,
    )


def _receive(sock: zmq.Socket, inbox: queue.Queue[ipc.ToCore]) -> None:
    while True:
        try:
            data = sock.recv()
        except zmq.ContextTerminated:
            return
        try:
            inbox.put(ipc.decode_to_core(data))
        except msgspec.DecodeError:
            log.exception("dropping a malformed message")


def _send(sock: zmq.Socket, outbox: queue.Queue[bytes | None]) -> None:
    while (data := outbox.get()) is not None:
        sock.send(data, copy=False)


def run_engine_core(config: CoreConfig) -> None:
    """Process entry point. Exits 0 on Shutdown, non-zero if the model cannot be loaded or a step fails."""
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s EngineCore %(name)s: %(message)s")  # fmt: skip
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API server decides when we stop
    ctx = zmq.Context()
    inbound = ctx.socket(zmq.PULL)
    inbound.bind(config.input_address)
    outbound = ctx.socket(zmq.PUSH)
    outbound.bind(config.output_address)
    try:
        from paged_engine.server.serving_engine import ServingEngine

        engine = ServingEngine.create(config)
    except Exception as exc:
        log.exception("engine core failed to start")
        outbound.send(ipc.encode(ipc.CoreFailed(f"{type(exc).__name__}: {exc}")))
        outbound.close(linger=2000)
        os._exit(1)
    # Everything loaded so far lives for the whole process: keep the cyclic GC from rescanning it every step.
    gc.collect()
    gc.freeze()
    outbound.send(ipc.encode(ipc.CoreReady(engine.info())))

    inbox: queue.Queue[ipc.ToCore] = queue.Queue()
    outbox: queue.Queue[bytes | None] = queue.Queue()
    threading.Thread(target=_receive, args=(inbound, inbox), name="core-input", daemon=True).start()
    sender = threading.Thread(target=_send, args=(outbound, outbox), name="core-output", daemon=True)
    sender.start()
    loop = _CoreLoop(engine, outbox)
    try:
        while not loop.stopping:
            busy = engine.has_unfinished_requests()
            messages = []
            if not busy:
                messages.append(inbox.get())  # idle: sleep until something arrives
            while True:
                try:
                    messages.append(inbox.get_nowait())
                except queue.Empty:
                    break
            immediate = [d for m in messages for d in loop.handle(m)]
            if immediate:
                outbox.put(ipc.encode(ipc.StepOutputs(immediate, engine.current_stats())))
            if engine.has_unfinished_requests() and not loop.stopping:
                outbox.put(ipc.encode(loop.step()))
    except Exception:
        log.exception("engine core step failed")
        os._exit(1)
    outbox.put(None)
    sender.join(5)
    os._exit(0)
