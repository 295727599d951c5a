"""The messages between the engine core and its worker processes, one tagged msgspec struct each: a step's input
down the shared-memory ring, start-up reports and step results back up each worker's pipe."""

from __future__ import annotations

import msgspec

from paged_engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from paged_engine.executor.report import RunnerReport


class RunStep(msgspec.Struct, tag="run_step", array_like=True):
    scheduler_output: SchedulerOutput


class StopWorkers(msgspec.Struct, tag="stop", array_like=True):
    pass


class WorkerReady(msgspec.Struct, tag="ready", array_like=True):
    rank: int
    report: RunnerReport


class WorkerFailed(msgspec.Struct, tag="failed", array_like=True):
    rank: int
    error: str  # the exception, as the worker saw it


class StepDone(msgspec.Struct, tag="step_done", array_like=True):
    rank: int
    output: ModelRunnerOutput | None  # the sampling rank's (rank 0); the others' are the same and not sent
    phases: dict[str, float]


ToWorkers = RunStep | StopWorkers
FromWorker = WorkerReady | WorkerFailed | StepDone

_to_workers = msgspec.msgpack.Decoder(ToWorkers)
_from_worker = msgspec.msgpack.Decoder(FromWorker)
_encoder = msgspec.msgpack.Encoder()


def encode(message: ToWorkers | FromWorker) -> bytes:
    return _encoder.encode(message)


def decode_to_workers(data: bytes) -> ToWorkers:
    return _to_workers.decode(data)


def decode_from_worker(data: bytes) -> FromWorker:
    return _from_worker.decode(data)
