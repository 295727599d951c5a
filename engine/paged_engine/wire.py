"""Messages between the API server and the engine-core process, and their msgpack codec.

The two processes talk over two ZMQ sockets: requests, aborts and control calls go API server → core on a
PUSH/PULL pair; outputs, step stats and control replies come back on another. Every message is its own tagged
msgspec struct, sent as it is (no pickle: a message can never execute code on the receiving side), so both sides
read typed fields, never string keys. The engine's own types travel as they are: ``SamplingParams`` in,
``EngineCoreOutput`` and ``SchedulerStats`` out, the engine contract's ``Budgets`` and ``BudgetLimits`` both ways.

Control calls (budgets, LoRA adapters) carry a ``call_id``; the core answers each with one reply of the same
``call_id``: the call's own reply type, or ``ControlFailed`` naming the field at fault (``param``) and the HTTP
status the refusal maps to.
"""

from __future__ import annotations

import msgspec
from paged_platform.engine_contract.budgets import BudgetLimits, Budgets

from paged_engine.core.engine_core_output import EngineCoreOutput
from paged_engine.core.stats import SchedulerStats
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
from paged_engine.sampling_params import SamplingParams

# ---- requests -------------------------------------------------------------------------------------------------


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


class Shutdown(msgspec.Struct, tag="shutdown", array_like=True):
    pass


# ---- control calls and their replies ----------------------------------------------------------------------------


class GetBudgets(msgspec.Struct, tag="get_budgets", array_like=True):
    call_id: int


class SetBudgets(msgspec.Struct, tag="set_budgets", array_like=True):
    """Either budget or both: both are applied, or neither."""

    call_id: int
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


class LoadLora(msgspec.Struct, tag="load_lora", array_like=True):
    call_id: int
    name: str
    path: str


class UnloadLora(msgspec.Struct, tag="unload_lora", array_like=True):
    call_id: int
    name: str


class ListLoras(msgspec.Struct, tag="list_loras", array_like=True):
    call_id: int


ControlCall = GetBudgets | SetBudgets | LoadLora | UnloadLora | ListLoras


class LoraInfo(msgspec.Struct, array_like=True):
    """A loaded LoRA adapter: its model name, folder, rank and weight slot."""

    name: str
    path: str
    rank: int
    slot: int


class BudgetsReply(msgspec.Struct, tag="budgets", array_like=True):
    """The budgets in force and the live limits (answers ``GetBudgets`` and ``SetBudgets``)."""

    call_id: int
    budgets: Budgets
    limits: BudgetLimits


class LorasReply(msgspec.Struct, tag="loras", array_like=True):
    """The adapters loaded now (answers ``ListLoras``, ``LoadLora`` and ``UnloadLora``)."""

    call_id: int
    loras: list[LoraInfo]


class ControlFailed(msgspec.Struct, tag="control_failed", array_like=True):
    """A refused call: the message for the user, the HTTP status it maps to (404: no such thing, 409: conflicts
    with the engine's state) and the request field at fault."""

    call_id: int
    message: str
    status: int = 400
    param: str | None = None


ControlReply = BudgetsReply | LorasReply | ControlFailed

# ---- the core's side --------------------------------------------------------------------------------------------


class EngineInfo(msgspec.Struct):
    """What the engine runs, sent once it is loaded: the API server builds its limits, model list and
    ``paged_engine_info`` from it."""

    model: str
    model_path: str
    max_model_len: int
    vocab_size: int
    max_logprobs: int
    num_blocks: int
    block_size: int
    device: str
    dtype: str
    attention_backend: str
    attention_fallback: str  # why the configured backend fell back to the reference one ("" if it did not)
    prefill_attention: str
    cuda_graphs: str  # "on" or "off"
    gemm_backend: str
    cpu_isas: dict[str, str]  # CPU kernel family -> the instruction set it runs ("none" without our kernels)
    cpu_bf16_gemm: str
    budgets: Budgets
    limits: BudgetLimits
    lora_enabled: bool
    max_loras: int
    max_lora_rank: int
    loras: list[LoraInfo]
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    world_size: int  # worker processes (1: the model runs in the engine-core process)
    collective_backend: str  # gloo, nccl, or "none" in one process

    def info_labels(self) -> dict[str, str]:
        """The labels of ``paged_engine_info``: how this engine serves, as the dashboards show it."""
        labels = {
            "device": self.device, "dtype": self.dtype, "attention_backend": self.attention_backend,
            "attention_fallback": self.attention_fallback, "gemm_backend": self.gemm_backend,
            "num_kv_blocks": str(self.num_blocks), "block_size": str(self.block_size),
            "prefill_attention": self.prefill_attention, "cuda_graphs": self.cuda_graphs,
            "cpu_bf16_gemm": self.cpu_bf16_gemm, "tensor_parallel_size": str(self.tensor_parallel_size),
            "pipeline_parallel_size": str(self.pipeline_parallel_size),
            "data_parallel_size": str(self.data_parallel_size),
            "world_size": str(self.world_size), "collective_backend": self.collective_backend,
        }  # fmt: skip
        return labels | {f"cpu_isa_{family}": self.cpu_isas.get(family, "none") for family in CPU_KERNEL_FAMILIES}


class StepOutputs(msgspec.Struct, tag="step", array_like=True):
    outputs: list[EngineCoreOutput]
    stats: SchedulerStats | None = None


class CoreReady(msgspec.Struct, tag="ready", array_like=True):
    """Sent once the model is loaded and the KV cache allocated."""

    info: EngineInfo


class CoreFailed(msgspec.Struct, tag="failed", array_like=True):
    """Sent when the core cannot start (bad model path, not enough memory): the message is shown to the user."""

    message: str


ToCore = AddRequest | AbortRequests | Shutdown | ControlCall
FromCore = StepOutputs | CoreReady | CoreFailed | ControlReply

_encoder = msgspec.msgpack.Encoder()
_to_core = msgspec.msgpack.Decoder(ToCore)
_from_core = msgspec.msgpack.Decoder(FromCore)


def encode(message: ToCore | FromCore) -> bytes:
    return _encoder.encode(message)


def decode_to_core(data: bytes) -> ToCore:
    return _to_core.decode(data)


def decode_from_core(data: bytes) -> FromCore:
    return _from_core.decode(data)
