"""The multiprocess executor: one worker process per rank, started and reaped by the engine core.

A step's input is written once to the shared-memory ring; every rank answers on its own pipe, rank 0 with the
sampled tokens. A worker that fails to start, dies, fails a step or takes longer than its timeout ends the
engine: the executor stops every worker (none is left behind) and raises a :class:`WorkerError` naming the rank
and what happened, which ends the engine-core process with a non-zero exit (and ``/health`` with it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from paged_engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from paged_engine.engine.config import EngineConfig
from paged_engine.executor import messages
from paged_engine.executor.in_process import add_adapter
from paged_engine.executor.node_channel import CoreChannel, inbox_of
from paged_engine.executor.report import RunnerReport
from paged_engine.executor.shm_ring import BroadcastRing, RingTimeout
from paged_engine.executor.worker_proc import WorkerArgs, run_worker
from paged_engine.lora.registry import LoraError, LoraRegistry
from paged_engine.parallel.layout import PipelineStage, TensorShard
from paged_engine.wire import LoraInfo

logger = logging.getLogger(__name__)
RING_SLOTS = 8
RING_SLOT_BYTES = 1 << 20
STOP_GRACE_S = 5.0
PEER_DEATH_GRACE_S = 1.0  # how long a rank's failure waits to learn whether a dead peer caused it


def check_cut(model_folder: Path, config: EngineConfig) -> None:
    """Refuse sizes the model cannot be cut by (a :class:`ShardingError` naming them) before any worker starts."""
    from paged_engine.loader.hf import load_hf_config
    from paged_engine.models.registry import spec_from_config

    spec = spec_from_config(load_hf_config(model_folder))
    TensorShard(0, config.tensor_parallel_size, spec.num_heads, spec.num_kv_heads, spec.intermediate_size,
                spec.vocab_size)  # fmt: skip
    PipelineStage(0, config.pipeline_parallel_size, spec.num_layers)


class WorkerError(RuntimeError):
    """A worker process failed; the message names its rank."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start workers without re-running the caller's script: spawn imports ``__main__`` in the child (from
    ``__spec__`` or ``__file__``), so a script calling ``LLM(..., tensor_parallel_size=2)`` at its top level would
    start itself again. Workers need nothing from it."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


@dataclass
class LocalWorkers:
    """This host's worker processes (ranks ``first_rank`` on), the ring they read and the pipes they answer on."""

    first_rank: int
    ring: BroadcastRing
    processes: list[BaseProcess] = field(default_factory=list)
    pipes: list[Connection] = field(default_factory=list)

    def rank_of(self, index: int) -> int:
        return self.first_rank + index


def start_workers(config: EngineConfig, model_folder: Path, *, serving: bool, init_method: str) -> LocalWorkers:
    """Spawn this host's ranks (``--node-rank`` × ranks per host on), each dying with this process."""
    first_rank = config.node_rank * config.local_world_size
    workers = LocalWorkers(first_rank, BroadcastRing.create(config.local_world_size, RING_SLOTS, RING_SLOT_BYTES))
    context = multiprocessing.get_context("spawn")
    log_level = str(logging.getLevelName(logging.getLogger().getEffectiveLevel()))
    for local_rank in range(config.local_world_size):
        rank = first_rank + local_rank
        receive, send = context.Pipe(duplex=False)
        args = WorkerArgs(config, model_folder, rank, local_rank, init_method, workers.ring.name, RING_SLOTS,
                          RING_SLOT_BYTES, serving, os.getpid(), log_level)  # fmt: skip
        process = context.Process(target=run_worker, args=(args, send), name=f"paged-worker-{rank}", daemon=True)
        with _main_module_hidden():
            process.start()
        send.close()
        workers.processes.append(process)
        workers.pipes.append(receive)
    return workers


def init_method_of(config: EngineConfig) -> str:
    """Where the ranks meet: host 0's store (a free loopback port when one host runs them all unnamed)."""
    if config.master_port is None:
        return f"tcp://127.0.0.1:{_free_port()}"
    return f"tcp://{config.master_addr}:{config.master_port}"


class MultiprocExecutor:
    def __init__(self, config: EngineConfig, model_folder: Path, *, serving: bool) -> None:
        self.config = config
        self.world_size = config.world_size
        self.loras = LoraRegistry(config.max_loras, config.max_lora_rank) if config.lora_enabled else None
        check_cut(model_folder, config)
        self.sampling_rank = config.sampling_rank
        self._phases: dict[str, float] = {}
        self._stopped = False
        self.remote = CoreChannel(config.master_addr, config.master_port) if config.nnodes > 1 else None
        self.local = start_workers(config, model_folder, serving=serving, init_method=init_method_of(config))
        self.ring, self.workers = self.local.ring, self.local.processes
        try:
            ready = self._collect(messages.WorkerReady, config.worker_start_timeout, "start-up")
        except BaseException:
            self.shutdown()
            raise
        self.report: RunnerReport = ready[0].report
        atexit.register(self.shutdown)  # an LLM left to the end of its script: stop the workers, free the ring
        logger.info("%d workers ready (tensor parallel over %d host(s), %s), local pids %s", self.world_size,
                    config.nnodes, self.report.collective_backend, [p.pid for p in self.workers])  # fmt: skip

    def _broadcast(self, message: messages.ToWorkers, timeout_s: float | None) -> None:
        data = messages.encode(message)
        if self.remote is not None:
            self.remote.publish(data)
        self.ring.write(data, timeout_s, self.check_health)

    # ---- steps --------------------------------------------------------------------------------------------------

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        timeout = self.config.worker_step_timeout
        try:
            self._broadcast(messages.RunStep(scheduler_output), timeout)
        except RingTimeout as exc:
            self._fail(f"the workers did not take the next step: {exc}")
        done = self._collect(messages.StepDone, timeout, "a step")[self.sampling_rank]
        self._phases = done.phases
        output = done.output
        assert output is not None
        return output

    def last_phases(self) -> dict[str, float]:
        return self._phases

    def _collect(self, kind: type, timeout_s: float, what: str) -> list:
        """One ``kind`` message from every rank, in rank order; a failure, a death or the timeout raises."""
        got: dict[int, object] = {}
        deadline = time.monotonic() + timeout_s
        sentinels = {p.sentinel: rank for rank, p in enumerate(self.workers)}
        pipes = [*self.local.pipes, *inbox_of(self.remote)]
        while len(got) < self.world_size:
            ready = wait([*pipes, *sentinels], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = [rank for rank in range(self.world_size) if rank not in got]
                why = f"worker rank(s) {late} did not finish {what} within {timeout_s:g} s"
                idle = self.ring.unread_by() if what == "a step" else []
                self._fail(why + (f"; rank(s) {idle} never took the step (hung or stopped)" if idle else ""))
            for item in ready:
                if item in sentinels:
                    continue  # read what the dead worker sent first, then report its death
                try:
                    message = messages.decode_from_worker(item.recv_bytes())  # type: ignore[union-attr]
                except EOFError:
                    continue
                if isinstance(message, messages.WorkerFailed):
                    self._fail(self._root_cause(message, what))
                if not isinstance(message, kind):
                    self._fail(f"worker rank {message.rank} sent {type(message).__name__} during {what}")
                got[message.rank] = message
            for sentinel, rank in sentinels.items():
                if sentinel in ready and rank not in got:
                    self.workers[rank].join(STOP_GRACE_S)  # its pipe closes a moment before it can be reaped
                    code = self.workers[rank].exitcode
                    self._fail(f"worker rank {rank} {exit_description(code)} during {what}")
        return [got[rank] for rank in range(self.world_size)]

    def _root_cause(self, failed: messages.WorkerFailed, what: str) -> str:
        """A rank's failure, or, when another rank has died, that death: a dead peer breaks the collectives of
        the ranks left, whose own errors are only its consequence."""
        deadline = time.monotonic() + PEER_DEATH_GRACE_S
        while time.monotonic() < deadline:
            # a signal, not an exit after reporting its own failure (code 1)
            dead = [r for r, p in enumerate(self.workers) if r != failed.rank and (p.exitcode or 0) < 0]
            if dead:
                code = self.workers[dead[0]].exitcode
                return (f"worker rank {dead[0]} {exit_description(code)} during {what} (rank {failed.rank} then "
                        f"failed: {failed.error})")  # fmt: skip
            time.sleep(0.05)
        return f"worker rank {failed.rank} failed during {what}: {failed.error}"

    def check_health(self) -> None:
        """Raise a :class:`WorkerError` if a worker has exited (and stop the others)."""
        for rank, process in enumerate(self.workers):
            if not process.is_alive():
                self._fail(f"worker rank {rank} {exit_description(process.exitcode)}")

    def _fail(self, why: str) -> None:
        logger.error("%s; stopping every worker", why)
        self.shutdown()
        raise WorkerError(why)

    # ---- adapters: every rank reads its share into the same slot --------------------------------------------

    def load_lora(self, name: str, path: str) -> LoraInfo:
        if self.loras is None:
            raise LoraError("LoRA is off: start the engine with --enable-lora or --lora-modules", 409)
        return add_adapter(self.loras, name, path, lambda lora: self._on_every_rank(
            messages.LoadAdapter(lora.slot, lora.cache_id, str(path)), "loading an adapter"))  # fmt: skip

    def unload_lora(self, cache_id: str) -> None:
        self._on_every_rank(messages.UnloadAdapter(cache_id), "unloading an adapter")

    def _on_every_rank(self, message: messages.LoadAdapter | messages.UnloadAdapter, what: str) -> None:
        """Broadcast an adapter change and wait for every rank; the first refusal is raised as a LoraError."""
        timeout = self.config.worker_step_timeout
        try:
            self._broadcast(message, timeout)
        except RingTimeout as exc:
            self._fail(f"the workers did not take an adapter change: {exc}")
        refusals = [done.refusal for done in self._collect(messages.AdapterDone, timeout, what) if done.refusal]
        if refusals:
            raise LoraError(refusals[0], param="path")

    # ---- the end ------------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every worker (asked first, then killed) and free the ring; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self.workers and all(p.is_alive() for p in self.workers):
            with contextlib.suppress(RingTimeout):
                self._broadcast(messages.StopWorkers(), timeout_s=1.0)
        stop_local(self.local)
        if self.remote is not None:
            self.remote.close()


def stop_local(workers: LocalWorkers) -> None:
    """Join this host's workers (killing those still running after the grace period), then free their ring."""
    reap(workers)
    release(workers)


def reap(workers: LocalWorkers) -> None:
    deadline = time.monotonic() + STOP_GRACE_S
    for process in workers.processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(STOP_GRACE_S)


def release(workers: LocalWorkers) -> None:
    for pipe in workers.pipes:
        pipe.close()
    workers.ring.close(unlink=True)
