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


class LoadAdapter(msgspec.Struct, tag="load_adapter", array_like=True):
    slot: int
    cache_id: str
    path: str


class UnloadAdapter(msgspec.Struct, tag="unload_adapter", array_like=True):
    cache_id: str


class WorkerReady(msgspec.Struct, tag="ready", array_like=True):
    rank: int
    report: RunnerReport


class WorkerFailed(msgspec.Struct, tag="failed", array_like=True):
    rank: int
    error: str  # the exception, as the worker saw it


class StepDone(msgspec.Struct, tag="step_done", array_like=True):
    rank: int
    output: ModelRunnerOutput | None  # the sampling rank's (the last stage's first); no other's is sent
    phases: dict[str, float]


class AdapterDone(msgspec.Struct, tag="adapter_done", array_like=True):
    rank: int
    refusal: str | None  # why this rank could not read the adapter (its slots unchanged); None: done


ToWorkers = RunStep | StopWorkers | LoadAdapter | UnloadAdapter
FromWorker = WorkerReady | WorkerFailed | StepDone | AdapterDone

_to_workers = msgspec.msgpack.Decoder(ToWorkers)
_from_worker = msgspec.msgpack.Decoder(FromWorker)
_encoder = msgspec.msgpack.Encoder()


def encode(message: ToWorkers | FromWorker) -> bytes:
    return _encoder.encode(message)


def decode_to_workers(data: bytes) -> ToWorkers:
    return _to_workers.decode(data)


def decode_from_worker(data: bytes) -> FromWorker:
    return _from_worker.decode(data)
