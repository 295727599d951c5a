"""A worker process: one rank of the model. It joins the ranks' process group, runs the start-up stages on its
share of the model, then runs every step the engine core broadcasts until told to stop.

Within a pipeline stage every rank runs the whole step, sampling included on the last stage (the gathered
logits and the seeded random state are the same on its ranks); the last stage broadcasts its tokens to the
others, so every rank's input batch stays in step. Only the sampling rank's output (the last stage's first rank)
goes to the core. A worker dies with the process that started it (``PR_SET_PDEATHSIG``), and any failure is
reported up its pipe, naming its rank, before it exits non-zero.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from paged_engine.engine.config import EngineConfig
from paged_engine.executor import messages
from paged_engine.executor.shm_ring import BroadcastRing, RingReader
from paged_engine.lora.registry import LoraError
from paged_engine.process_tree import die_with_parent

if TYPE_CHECKING:
    from paged_engine.worker.model_runner import ModelRunner

log = logging.getLogger("paged_engine.worker")


@dataclass(frozen=True)
class WorkerArgs:
    config: EngineConfig
    model_folder: Path
    rank: int
    local_rank: int  # index among this host's ranks: its ring reader and its GPU
    init_method: str  # where the ranks meet (tcp://127.0.0.1:PORT on one host)
    ring_name: str
    ring_slots: int
    ring_slot_bytes: int
    serving: bool
    parent_pid: int
    log_level: str


def rank_config(config: EngineConfig, local_rank: int) -> EngineConfig:
    """The rank's own settings: its GPU (``cuda:LOCAL_RANK``) and, on a CPU, its share of the host's cores."""
    import torch

    if config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available()):
        return dataclasses.replace(config, device=f"cuda:{config.first_device_index() + local_rank}")
    return dataclasses.replace(config, num_threads=config.threads_per_rank(os.cpu_count() or 1))


def run_worker(args: WorkerArgs, conn: Connection) -> None:
    """Process entry point. Exits 0 when told to stop, 1 after reporting a failure."""
    die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the engine core decides when workers stop
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s Worker{args.rank} %(name)s: %(message)s")  # fmt: skip
    rank = args.rank
    try:
        import torch

        from paged_engine.engine import startup
        from paged_engine.executor.in_process import runner_report
        from paged_engine.parallel.collectives import init_group
        from paged_engine.tokenizer import load_tokenizer

        config = rank_config(args.config, args.local_rank)
        device = startup.resolve_device(config.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        backend = init_group(rank, config.world_size, args.init_method, device, config.worker_step_timeout)
        tokenizer = lambda: load_tokenizer(args.model_folder)  # noqa: E731
        built = startup.start_runner(config, args.model_folder, serving=args.serving, load_tokenizer=tokenizer,
                                     rank=rank)  # fmt: skip
        conn.send_bytes(messages.encode(messages.WorkerReady(rank, runner_report(built, backend))))
    except Exception as exc:
        log.exception("worker %d failed to start", rank)
        conn.send_bytes(messages.encode(messages.WorkerFailed(rank, f"{type(exc).__name__}: {exc}")))
        os._exit(1)
    gc.collect()
    gc.freeze()
    ring = BroadcastRing.attach(args.ring_name, config.local_world_size, args.ring_slots, args.ring_slot_bytes)
    reader = RingReader(ring, args.local_rank)

    def parent_alive() -> None:
        if os.getppid() != args.parent_pid:
            os._exit(1)

    runner = built.runner.runner
    sampling = config.sampling_rank  # its output goes to the core
    while True:
        message = messages.decode_to_workers(reader.read(check=parent_alive))
        if isinstance(message, messages.StopWorkers):
            os._exit(0)
        try:
            reply = handle(runner, rank, sampling, message)
        except Exception as exc:
            log.exception("worker %d failed a step", rank)
            conn.send_bytes(messages.encode(messages.WorkerFailed(rank, f"{type(exc).__name__}: {exc}")))
            os._exit(1)
        conn.send_bytes(messages.encode(reply))


def handle(
    runner: ModelRunner,
    rank: int,
    sampling: int,
    message: messages.RunStep | messages.LoadAdapter | messages.UnloadAdapter,
) -> messages.StepDone | messages.AdapterDone:
    """One broadcast message's work and this rank's answer; an exception is the worker's end."""
    if isinstance(message, messages.RunStep):
        output = runner.execute_model(message.scheduler_output)
        return messages.StepDone(rank, output if rank == sampling else None, runner.last_phases)
    slots = runner.lora
    assert slots is not None, "adapter messages come only with LoRA on"
    if isinstance(message, messages.UnloadAdapter):
        slots.unload(message.cache_id)
        return messages.AdapterDone(rank, None)
    try:
        slots.load_folder(message.slot, message.cache_id, message.path)
    except LoraError as exc:
        return messages.AdapterDone(rank, str(exc))
    return messages.AdapterDone(rank, None)
