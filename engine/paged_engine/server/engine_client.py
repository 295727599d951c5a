"""The API server's side of the engine-core connection: submit requests, route outputs, watch the process.

One background task reads everything the core sends and routes it: request deltas to the per-request queue of
whoever is waiting on them, step stats to the metrics, control replies to their futures. If the core process
dies, every waiting request gets an error at once and ``dead`` turns true (``/health`` then fails and the server
exits non-zero so Kubernetes restarts the pod).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing.process
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import zmq
import zmq.asyncio

from paged_engine import wire
from paged_engine.core import EngineCoreOutput
from paged_engine.core.stats import SchedulerStats
from paged_engine.output_processor import OutputRouter
from paged_engine.sampling_params import SamplingParams

log = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """The engine-core process is gone; nothing more can be served."""


class ControlError(ValueError):
    """The engine core refused a control call (e.g. a budget outside its bounds); ``status``: its HTTP status,
    ``param``: the field at fault."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


StreamQueue = asyncio.Queue[tuple[str, EngineCoreOutput | None]]


@dataclass
class RequestStream:
    """Outputs of one engine request, in order. Several streams may share one queue (the choices of one HTTP
    request); each puts a final ``(request_id, None)`` when it ends, finished or because the engine died."""

    request_id: str
    queue: StreamQueue = field(default_factory=asyncio.Queue)
    scheduled: bool = False


class EngineClient:
    def __init__(
        self,
        process: multiprocessing.process.BaseProcess,
        input_address: str,
        output_address: str,
        on_stats: Callable[[SchedulerStats], None],
    ) -> None:
        self.process = process
        self._ctx = zmq.asyncio.Context()
        self._input = self._ctx.socket(zmq.PUSH)
        self._input.connect(input_address)
        self._output = self._ctx.socket(zmq.PULL)
        self._output.connect(output_address)
        self._on_stats = on_stats
        self._streams: OutputRouter[RequestStream] = OutputRouter()
        self._calls: dict[int, asyncio.Future[wire.ControlReply]] = {}
        self._call_ids = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self.dead = False
        self.on_death: Callable[[], None] | None = None

    @property
    def num_unscheduled(self) -> int:
        """Requests submitted that the scheduler has not started yet (the admission limit counts these)."""
        return sum(1 for s in self._streams.targets() if not s.scheduled)

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    async def wait_ready(self, timeout: float) -> wire.EngineInfo:
        """Waits for the core's READY message (model loaded); raises with the core's own message on failure."""
        poller = zmq.asyncio.Poller()
        poller.register(self._output, zmq.POLLIN)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if not self.process.is_alive():
                raise EngineDeadError(f"engine core exited with code {self.process.exitcode} while starting")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise EngineDeadError(f"engine core did not become ready within {timeout:.0f}s")
            events = await poller.poll(timeout=min(remaining, 0.5) * 1000)
            if not events:
                continue
            message = wire.decode_from_core(await self._output.recv())
            if isinstance(message, wire.CoreReady):
                return message.info
            if isinstance(message, wire.CoreFailed):
                raise EngineDeadError(message.message)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._read_outputs()))
        loop.add_reader(self.process.sentinel, self._core_exited)

    async def close(self) -> None:
        if not self.dead and self.process.is_alive():
            await self._input.send(wire.encode(wire.Shutdown()))
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.process.sentinel)
        await asyncio.to_thread(self.process.join, 10)
        if self.process.is_alive():
            self.process.kill()
        self._ctx.destroy(linger=0)

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        priority: int = 0,
        cache_salt: str | None = None,
        queue: StreamQueue | None = None,
        lora_name: str | None = None,
    ) -> list[str]:
        """Submits one engine request; returns the ids its outputs arrive under (``n > 1``: its children)."""
        if self.dead:
            raise EngineDeadError("the engine core is not running")
        shared = queue if queue is not None else asyncio.Queue()
        streams = self._streams.add(request_id, params.n, lambda sid, _: RequestStream(sid, shared))
        message = wire.AddRequest(request_id, prompt_token_ids, params, arrival_time, priority, cache_salt, lora_name)
        self._input.send(wire.encode(message), copy=False)
        return [s.request_id for s in streams]

    def abort(self, request_ids: list[str]) -> None:
        """Aborts requests (a parent id aborts all its choices); their streams get no further outputs."""
        live = []
        for rid in request_ids:
            ids = self._streams.streams_of(rid)
            for sid in ids:
                self._streams.remove(sid)
            if ids:
                live.append(rid)
        if live and not self.dead:
            self._input.send(wire.encode(wire.AbortRequests(live)))

    async def _call(self, make: Callable[[int], wire.ControlCall], timeout: float = 10.0) -> wire.ControlReply:
        """Sends the call ``make(call_id)`` and waits for its reply; a refusal raises ``ControlError``."""
        if self.dead:
            raise EngineDeadError("the engine core is not running")
        call_id = next(self._call_ids)
        future: asyncio.Future[wire.ControlReply] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        await self._input.send(wire.encode(make(call_id)))
        try:
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self._calls.pop(call_id, None)
        if isinstance(reply, wire.ControlFailed):
            raise ControlError(reply.message, reply.status, reply.param)
        return reply

    async def get_budgets(self) -> wire.BudgetsReply:
        return _expect(await self._call(wire.GetBudgets), wire.BudgetsReply)

    async def set_budgets(self, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> wire.BudgetsReply:
        """Both or neither; the engine checks them against the contract and its live limits."""
        reply = await self._call(lambda call_id: wire.SetBudgets(call_id, max_num_seqs, max_num_batched_tokens))
        return _expect(reply, wire.BudgetsReply)

    async def list_loras(self) -> list[wire.LoraInfo]:
        return _expect(await self._call(wire.ListLoras), wire.LorasReply).loras

    async def load_lora(self, name: str, path: str, timeout: float) -> list[wire.LoraInfo]:
        """Loads an adapter; returns the adapters loaded afterwards."""
        reply = await self._call(lambda call_id: wire.LoadLora(call_id, name, path), timeout)
        return _expect(reply, wire.LorasReply).loras

    async def unload_lora(self, name: str, timeout: float) -> list[wire.LoraInfo]:
        reply = await self._call(lambda call_id: wire.UnloadLora(call_id, name), timeout)
        return _expect(reply, wire.LorasReply).loras

    async def _read_outputs(self) -> None:
        while True:
            data = await self._output.recv()
            start = time.perf_counter()
            message = wire.decode_from_core(data)
            if isinstance(message, wire.StepOutputs):
                for out in message.outputs:
                    self._route(out)
                if message.stats is not None:
                    ipc = {"ipc_decode": time.perf_counter() - start}  # decoding and routing one step's outputs
                    self._on_stats(dataclasses.replace(message.stats, step_phases={**message.stats.step_phases, **ipc}))
            elif isinstance(message, wire.BudgetsReply | wire.LorasReply | wire.ControlFailed):
                future = self._calls.get(message.call_id)
                if future is not None and not future.done():
                    future.set_result(message)

    def _route(self, out: EngineCoreOutput) -> None:
        for sid, stream in self._streams.route(out):
            stream.scheduled = True
            stream.queue.put_nowait((sid, out))
            if out.finish_reason is not None:
                stream.queue.put_nowait((sid, None))

    def _core_exited(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.process.sentinel)
        self.process.join(0)
        log.error("engine core process exited unexpectedly (exit code %s)", self.process.exitcode)
        self.dead = True
        for stream in self._streams.targets():
            stream.queue.put_nowait((stream.request_id, None))
        self._streams.clear()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(EngineDeadError("the engine core died"))
        if self.on_death is not None:
            self.on_death()


R = TypeVar("R")


def _expect(reply: wire.ControlReply, kind: type[R]) -> R:
    """The reply as the type its call answers with (anything else is a protocol error, not a user's)."""
    if not isinstance(reply, kind):
        raise RuntimeError(f"the engine core answered with {type(reply).__name__}, expected {kind.__name__}")
    return reply
