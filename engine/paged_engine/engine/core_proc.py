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
from typing import TYPE_CHECKING

import msgspec
import zmq
from paged_platform.engine_contract.budgets import SettingError

from paged_engine import wire
from paged_engine.core import EngineCoreOutput, FinishReason
from paged_engine.engine.config import EngineConfig
from paged_engine.lora.registry import LoraError
from paged_engine.process_tree import die_with_parent

if TYPE_CHECKING:
    from paged_engine.engine.engine_core import EngineCore

log = logging.getLogger("paged_engine.core_proc")
IDLE_HEALTH_CHECK_S = 1.0  # how soon an idle engine notices a dead worker (and fails /health by exiting)


@dataclass
class CoreProcAddresses:
    """Where the API server and the core meet (ipc:// sockets in a private temporary folder)."""

    input_address: str
    output_address: str


class _CoreLoop:
    def __init__(self, engine: EngineCore, to_send: queue.Queue[bytes | None]) -> None:
        self.engine = engine
        self.to_send = to_send
        self.unscheduled: set[str] = set()  # requests whose first scheduling is still to be reported
        self.stopping = False

    def handle(self, message: wire.ToCore) -> list[EngineCoreOutput]:
        """Applies one message; returns outputs to send right away (refusals, aborts)."""
        if isinstance(message, wire.AddRequest):
            engine = self.engine
            try:
                engine.add_request(engine.make_request(
                    message.request_id, message.prompt_token_ids, message.sampling_params, message.arrival_time,
                    message.priority, message.cache_salt, message.lora_name,
                ))  # fmt: skip
            except ValueError as exc:  # RequestValidationError included
                return [EngineCoreOutput(message.request_id, [], FinishReason.ABORT, error=str(exc))]
            self.unscheduled.add(message.request_id)
        elif isinstance(message, wire.AbortRequests):
            self.unscheduled.difference_update(message.request_ids)
            return self.engine.abort_requests(message.request_ids)
        elif isinstance(message, wire.Shutdown):
            self.stopping = True
        else:
            self.to_send.put(wire.encode(self.control(message)))
        return []

    def control(self, call: wire.ControlCall) -> wire.ControlReply:
        """One control call's reply; a refusal keeps the field at fault and the status it maps to."""
        engine = self.engine
        try:
            if isinstance(call, wire.GetBudgets | wire.SetBudgets):
                if isinstance(call, wire.SetBudgets):
                    engine.set_budgets(call.max_num_seqs, call.max_num_batched_tokens)
                return wire.BudgetsReply(call.call_id, engine.budgets(), engine.budget_limits)
            if isinstance(call, wire.LoadLora):
                engine.load_lora(call.name, call.path)
            elif isinstance(call, wire.UnloadLora):
                engine.unload_lora(call.name)
            return wire.LorasReply(call.call_id, engine.loaded_loras())
        except LoraError as exc:
            return wire.ControlFailed(call.call_id, str(exc), status=exc.status, param=exc.param)
        except SettingError as exc:
            return wire.ControlFailed(call.call_id, str(exc), param=exc.param)
        except (ValueError, TypeError) as exc:
            return wire.ControlFailed(call.call_id, str(exc))

    def step(self) -> wire.StepOutputs:
        outputs = self.engine.step()
        if self.unscheduled:
            now = time.time()
            started = {rid for rid in self.unscheduled if self.engine.is_started(rid)}
            reported = {out.req_id for out in outputs}
            for out in outputs:
                if out.req_id in started or out.parent_req_id in started:
                    out.first_scheduled_time = now
            outputs += [EngineCoreOutput(rid, [], first_scheduled_time=now) for rid in started - reported]
            self.unscheduled -= started
        return wire.StepOutputs(outputs, self.engine.last_stats)


def _receive(sock: zmq.Socket, inbox: queue.Queue[wire.ToCore]) -> None:
    while True:
        try:
            data = sock.recv()
        except zmq.ContextTerminated:
            return
        try:
            inbox.put(wire.decode_to_core(data))
        except msgspec.DecodeError:
            log.exception("dropping a malformed message")


def _send(sock: zmq.Socket, outbox: queue.Queue[bytes | None]) -> None:
    while (data := outbox.get()) is not None:
        sock.send(data, copy=False)


def run_engine_core(config: EngineConfig, addresses: CoreProcAddresses, log_level: str, parent_pid: int) -> None:
    """Process entry point. Exits 0 on Shutdown, non-zero if the model cannot be loaded or a step fails (a
    worker's failure included: the log names its rank)."""
    die_with_parent(parent_pid)
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s EngineCore %(name)s: %(message)s")  # fmt: skip
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API server decides when we stop
    ctx = zmq.Context()
    inbound = ctx.socket(zmq.PULL)
    inbound.bind(addresses.input_address)
    outbound = ctx.socket(zmq.PUSH)
    outbound.bind(addresses.output_address)
    try:
        from paged_engine.engine.engine_core import EngineCore  # torch and the model: this process only

        engine = EngineCore(config, serving=True)
    except Exception as exc:
        log.exception("engine core failed to start")
        outbound.send(wire.encode(wire.CoreFailed(f"{type(exc).__name__}: {exc}")))
        outbound.close(linger=2000)
        os._exit(1)
    # Everything loaded so far lives for the whole process: keep the cyclic GC from rescanning it every step.
    gc.collect()
    gc.freeze()
    outbound.send(wire.encode(wire.CoreReady(engine.info())))

    inbox: queue.Queue[wire.ToCore] = queue.Queue()
    outbox: queue.Queue[bytes | None] = queue.Queue()
    threading.Thread(target=_receive, args=(inbound, inbox), name="core-input", daemon=True).start()
    sender = threading.Thread(target=_send, args=(outbound, outbox), name="core-output", daemon=True)
    sender.start()
    loop = _CoreLoop(engine, outbox)
    try:
        while not loop.stopping:
            busy = engine.has_unfinished_requests()
            messages = []
            if not busy:  # idle: sleep until something arrives, checking on the workers now and then
                while not messages:
                    try:
                        messages.append(inbox.get(timeout=IDLE_HEALTH_CHECK_S))
                    except queue.Empty:
                        engine.check_health()
            while True:
                try:
                    messages.append(inbox.get_nowait())
                except queue.Empty:
                    break
            immediate = [out for m in messages for out in loop.handle(m)]
            if immediate:
                outbox.put(wire.encode(wire.StepOutputs(immediate, engine.current_stats())))
            if engine.has_unfinished_requests() and not loop.stopping:
                outbox.put(wire.encode(loop.step()))
    except Exception:
        log.exception("engine core step failed")
        engine.shutdown()
        os._exit(1)
    engine.shutdown()
    outbox.put(None)
    sender.join(5)
    os._exit(0)
