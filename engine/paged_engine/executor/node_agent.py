"""``paged-engine serve --headless``: a host other than the first runs only its ranks. No API server, no scheduler:
the agent starts this host's workers, writes every message the engine core publishes into their ring, and sends
their answers back. It exits 0 when the core stops the workers, 1 when one of them fails or dies (the core learns
of it from the answer, or from its own ranks' broken collectives).
"""

from __future__ import annotations

import logging
import threading
from multiprocessing.connection import wait
from pathlib import Path

from paged_engine.engine.config import EngineConfig
from paged_engine.executor import messages
from paged_engine.executor.multiproc import (
    LocalWorkers,
    exit_description,
    init_method_of,
    reap,
    release,
    start_workers,
)
from paged_engine.executor.node_channel import AgentChannel

log = logging.getLogger("paged_engine.node_agent")
POLL_MS = 500  # how soon the agent notices one of its workers has failed while no message comes


def run_node(config: EngineConfig, model_folder: Path) -> int:
    """Serve this host's ranks until the engine core stops them; returns the process's exit code."""
    if config.node_rank == 0 or config.master_port is None:
        raise ValueError("--headless runs the ranks of a host other than the first: give --node-rank N (N > 0) "
                         "and --master-port")  # fmt: skip
    channel = AgentChannel(config.master_addr, config.master_port)  # subscribed before any step is published
    workers = start_workers(config, model_folder, serving=True, init_method=init_method_of(config))
    log.info("node %d of %d: ranks %d-%d started", config.node_rank, config.nnodes, workers.first_rank,
             workers.first_rank + config.local_world_size - 1)  # fmt: skip
    failed, stopping = threading.Event(), threading.Event()
    forward = threading.Thread(target=_forward_answers, args=(workers, channel, failed, stopping), daemon=True)
    forward.start()
    try:
        while not failed.is_set():
            data = channel.receive(POLL_MS)
            if data is None:
                continue
            workers.ring.write(data)
            if isinstance(messages.decode_to_workers(data), messages.StopWorkers):
                break
    finally:
        stopping.set()
        reap(workers)
        forward.join(5)  # it ends once every pipe is closed by its worker's exit
        release(workers)
        channel.close()
    return 1 if failed.is_set() else 0


def _forward_answers(
    workers: LocalWorkers, channel: AgentChannel, failed: threading.Event, stopping: threading.Event
) -> None:
    """Send every answer of this host's workers to the core; a worker's death (not asked for) is sent as its
    failure."""
    sentinels = {p.sentinel: i for i, p in enumerate(workers.processes)}
    open_pipes = list(workers.pipes)
    while open_pipes:
        for item in wait([*open_pipes, *sentinels]):
            if item in sentinels:
                index = sentinels.pop(item)
                process = workers.processes[index]
                process.join(5)
                if not stopping.is_set() and process.exitcode != 0:
                    why = f"{exit_description(process.exitcode)} on node agent"
                    channel.answer(messages.encode(messages.WorkerFailed(workers.rank_of(index), why)))
                    failed.set()
                continue
            try:
                channel.answer(item.recv_bytes())  # type: ignore[union-attr]
            except EOFError:
                open_pipes.remove(item)  # type: ignore[arg-type]
