"""Messages between the API server and the engine-core process, and their msgpack codec.

The two processes talk over two ZMQ sockets: requests, aborts and control calls go API server → core on a
PUSH/PULL pair; outputs, step stats and control replies come back on another. msgspec structs keep the wire
format compact and typed (no pickle: a message can never execute code on the receiving side). The engine's own
types travel as they are: ``SamplingParams`` in, ``EngineCoreOutput`` and ``SchedulerStats`` out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from paged_engine.core.engine_core_output import EngineCoreOutput
from paged_engine.core.stats import SchedulerStats
from paged_engine.sampling_params import SamplingParams


class AddRequest(msgspec.Struct, tag="add", array_like=True):
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    priority: int = 0
    cache_salt: str | None = None
    lora_name: str | None = None  # a loaded LoRA adapter, None for the base model


class AbortRequests(msgspec.Struct, tag="abort", array_like=True):
    request_ids: list[str]


class ControlCall(msgspec.Struct, tag="call", array_like=True):
    """A control-plane call (budgets, stats) answered by a ControlReply with the same ``call_id``."""

    call_id: int
    method: str
    args: dict[str, Any] = {}


class Shutdown(msgspec.Struct, tag="shutdown", array_like=True):
    pass


ToCore = AddRequest | AbortRequests | ControlCall | Shutdown


class ControlReply(msgspec.Struct, tag="reply", array_like=True):
    call_id: int
    result: Any = None
    error: str | None = None
    status: int = 400  # the HTTP status an error maps to (404: no such thing, 409: conflicts with state)
    param: str | None = None  # the request field an error is about


class StepOutputs(msgspec.Struct, tag="step", array_like=True):
    outputs: list[EngineCoreOutput]
    stats: SchedulerStats | None = None


class CoreReady(msgspec.Struct, tag="ready", array_like=True):
    """Sent once the model is loaded and the KV cache allocated."""

    info: dict[str, Any]


class CoreFailed(msgspec.Struct, tag="failed", array_like=True):
    """Sent when the core cannot start (bad model path, not enough memory): the message is shown to the user."""

    message: str


FromCore = StepOutputs | ControlReply | CoreReady | CoreFailed

_encoder = msgspec.msgpack.Encoder()
_to_core = msgspec.msgpack.Decoder(ToCore)
_from_core = msgspec.msgpack.Decoder(FromCore)


def encode(message: ToCore | FromCore) -> bytes:
    return _encoder.encode(message)


def decode_to_core(data: bytes) -> ToCore:
    return _to_core.decode(data)


def decode_from_core(data: bytes) -> FromCore:
    return _from_core.decode(data)
