"""How an engine core starts, in four stages, each a function of what the earlier ones produced:

1. **device** (``place``): the device and dtype resolved, the CPU kernels' instruction sets chosen, the threads set;
2. **model and adapters** (``load_model``): the weights loaded (and packed for the CPU GEMMs), the greedy head
   chosen, the LoRA slots allocated (before the KV cache is sized, so a fractional budget counts them);
3. **KV plan** (``plan_kv``): the scheduler's budgets resolved by the engine contract's per-device rule, the
   context length, the KV cache's blocks and the live budget limits (the runner's batch is sized for them);
4. **runner** (``build_runner``): the attention backend selected for what the kernels cover, FlashAttention for
   prefill where it applies, the model runner and its CUDA graphs.

Runs in the engine-core process (in-process for ``LLM``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from paged_platform.engine_contract.budgets import BudgetLimits
from paged_platform.engine_contract.memory import default_kv_cache_memory

from paged_engine.attention import get_backend
from paged_engine.attention.backend import AttentionBackend
from paged_engine.attention.cuda import CudaKernelBackend
from paged_engine.attention.flash import load_flash_attention
from paged_engine.attention.selection import AttentionShape, KernelBuild, Selection, flash_gap, select
from paged_engine.core.scheduler_config import SchedulerConfig
from paged_engine.engine.config import EngineConfig
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
from paged_engine.kernels.cpu_isa import bf16_gemm_unit, cap_cpu_isa, describe_isas
from paged_engine.loader.default_model import resolve_model
from paged_engine.loader.hf import load_hf_model
from paged_engine.lora.layers import LoraSlots
from paged_engine.lora.registry import LoraRegistry
from paged_engine.models.cpu_gemm import resolve_gemm_backend
from paged_engine.models.decoder import DecoderForCausalLM
from paged_engine.parallel.collectives import world_min
from paged_engine.sample import StructuredOutput
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder
from paged_engine.worker.cpu_malloc import keep_freed_memory
from paged_engine.worker.cuda_graphs import graphs_off_reason
from paged_engine.worker.kv_cache import KVCachePlan, plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_folder(config: EngineConfig) -> Path:
    """The model's Hugging Face folder (the default model and GGUF files are converted into a cache once)."""
    return Path(resolve_model(config.model, write_tokenizer=write_gguf_tokenizer_folder, revision=config.revision))


# ---- 1. device ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where and in what precision the model runs, and which CPU kernel variants serve it."""

    device: torch.device
    dtype: torch.dtype
    cpu_isas: dict[str, str]  # kernel family -> instruction set ("none" without our kernels)
    cpu_bf16_gemm: str  # what oneDNN's bf16 GEMMs run on ("none" off the CPU)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def resolve_device(device: str) -> torch.device:
    """``auto``: the first GPU when one is visible, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r} was asked for, but no GPU is visible to torch (CUDA {torch.version.cuda})"
        )
    return resolved


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto``: bfloat16 on a GPU, float32 on a CPU: token-exact, and bf16 there, though faster on CPUs with
    AVX512-BF16 or AMX, misses the 99 % top-1 agreement bar (98 % on Gemma 3 270M:
    docs/benchmarks.md#why-the-cpus-default-dtype-is-fp32)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def apply_cpu_isa(level: str, dtype: torch.dtype) -> dict[str, str]:
    """Each CPU kernel family's instruction set, capped at ``level`` (``auto`` times attention with ``dtype``
    caches); "none" for every family when the kernels can't be built here."""
    try:
        ops.load()
    except ops.KernelBuildError:
        return dict.fromkeys(CPU_KERNEL_FAMILIES, "none")
    isas = cap_cpu_isa(level, dtype)
    logger.info("CPU kernels: %s (this CPU supports %s)", describe_isas(isas), ", ".join(ops.supported_cpu_isas()))
    return isas


def place(config: EngineConfig) -> Placement:
    torch.manual_seed(config.seed)
    threads = config.threads_per_rank(os.cpu_count() or 1)
    if threads is not None:
        torch.set_num_threads(threads)
    device = resolve_device(config.device)
    if device.type == "cuda" and device.index is None and config.data_parallel_size > 1:
        device = torch.device("cuda", config.first_device_index())  # this core's GPU, after the other cores'

    dtype = resolve_dtype(config.dtype, device)
    cpu_isas = apply_cpu_isa(config.cpu_isa, dtype)
    bf16_gemm = "none"
    if device.type == "cpu":
        bf16_gemm = bf16_gemm_unit()
        logger.info("bf16 GEMMs (oneDNN) run on: %s", bf16_gemm)
        keep_freed_memory()
    return Placement(device, dtype, cpu_isas, bf16_gemm)


# ---- 2. model and adapters --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    model: DecoderForCausalLM
    gemm_backend: str  # "packed" or "torch"
    eos_token_ids: list[int]
    lora_slots: LoraSlots | None  # None: LoRA off
    loras: LoraRegistry | None


def eos_token_ids(folder: Path, config: object) -> list[int]:
    """Every id that ends generation: ``generation_config.json`` first, then ``config.json``'s."""
    ids: list[int] = []
    gen = folder / "generation_config.json"
    sources = [json.loads(gen.read_text()).get("eos_token_id")] if gen.is_file() else []
    sources.append(getattr(config, "eos_token_id", None))
    for value in sources:
        for token in [value] if isinstance(value, int) else list(value or []):
            if token not in ids:
                ids.append(int(token))
    return ids


def load_model(config: EngineConfig, folder: Path, placement: Placement, rank: int = 0) -> LoadedModel:
    """The model (rank ``rank``'s share of it under tensor and pipeline parallelism) and its adapters' slots."""
    model, hf_config = load_hf_model(folder, dtype=placement.dtype, device=placement.device, rank=rank,
                                     tp_size=config.tensor_parallel_size,
                                     pp_size=config.pipeline_parallel_size)  # fmt: skip
    gemm_backend = resolve_gemm_backend(config.gemm_backend, placement.device, placement.dtype)
    if gemm_backend == "packed":
        model.pack_weights_for_cpu()
    logger.info("device %s, dtype %s, GEMM backend %s", placement.device, placement.dtype_name, gemm_backend)
    if model.tp is not None:  # exact fp32 on each rank's columns, whatever --greedy-head says
        model.use_tensor_parallel_greedy()
        logger.info("greedy head: each rank's best token gathered (tensor parallelism)")
    elif config.greedy_head == "auto" and gemm_backend == "packed":
        reason = model.use_rescored_greedy()
        logger.info("greedy head: %s", (reason and f"fp32 ({reason})") or "bf16 candidates, fp32 rescoring")
    lora_slots, loras = None, None
    if config.lora_enabled:
        lora_slots = LoraSlots(model, config.max_loras, config.max_lora_rank, placement.dtype, placement.device)
        loras = LoraRegistry(config.max_loras, config.max_lora_rank)
        logger.info("LoRA: %d slots of rank %d, %.1f MiB", config.max_loras, config.max_lora_rank,
                    lora_slots.nbytes / 2**20)  # fmt: skip
    return LoadedModel(model, gemm_backend, eos_token_ids(folder, hf_config), lora_slots, loras)


# ---- 3. KV plan --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVPlan:
    scheduler: SchedulerConfig  # budgets and max_model_len resolved
    kv_cache: KVCachePlan
    limits: BudgetLimits  # the live budgets' limits: the runner's batch is sized for them

    @property
    def max_model_len(self) -> int:
        assert self.scheduler.max_model_len is not None
        return self.scheduler.max_model_len


def resolve_scheduler(config: EngineConfig, device_type: str, serving: bool, model_max_len: int) -> SchedulerConfig:
    """The scheduler's settings for this device (the engine contract's rule), the context length resolved."""
    scheduler = config.scheduler.resolved(device_type, serving)
    return dataclasses.replace(scheduler, max_model_len=scheduler.max_model_len or model_max_len)


def plan_kv(config: EngineConfig, model: DecoderForCausalLM, placement: Placement, *, serving: bool) -> KVPlan:
    scheduler = resolve_scheduler(config, placement.device.type, serving, model.spec.max_position_embeddings)
    assert scheduler.max_model_len is not None
    max_model_len = scheduler.max_model_len
    kv_cache_memory = config.kv_cache_memory
    if kv_cache_memory is None:
        kv_cache_memory = default_kv_cache_memory(placement.device.type)
    plan = plan_kv_cache(model, config.block_size, placement.dtype, max_model_len,
                         kv_cache_memory=kv_cache_memory, num_blocks=config.num_kv_blocks,
                         device=placement.device)  # fmt: skip
    if model.tp is not None or model.pp is not None:  # one block table for every rank: the pool fits the rank
        fewest = world_min(plan.config.num_blocks, placement.device)  # with the least memory
        if fewest != plan.config.num_blocks:
            plan = plan_kv_cache(model, config.block_size, placement.dtype, max_model_len, num_blocks=fewest,
                                 device=placement.device)  # fmt: skip
    logger.info("KV cache: %d blocks of %d tokens, %d groups of %d layers, %.1f MiB", plan.config.num_blocks,
                plan.config.block_size, len(plan.config.groups), plan.group_size, plan.total_bytes / 2**20)  # fmt: skip
    limits = scheduler.live_limits()
    logger.info("scheduler budget: %d tokens and %d sequences per step (live limits %d and %d)",
                scheduler.max_num_batched_tokens, scheduler.max_num_seqs, limits.max_num_batched_tokens,
                limits.max_num_seqs)  # fmt: skip
    return KVPlan(scheduler, plan, limits)


# ---- 4. runner ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runner:
    runner: ModelRunner
    attention: Selection
    graphs_off: str | None  # why decode steps run eagerly; None: CUDA graphs
    prefill_attention: str  # what serves prefill attention
    grammars: GrammarCompiler


def kernel_build() -> KernelBuild:
    try:
        ext = ops.load()
    except ops.KernelBuildError as exc:
        return KernelBuild(False, why_unavailable=str(exc))
    return KernelBuild(True, with_cuda=ext.with_cuda)


def select_attention(config: EngineConfig, placement: Placement, head_size: int) -> Selection:
    shape = AttentionShape(placement.device.type, placement.dtype_name, head_size, config.block_size)
    kernels = kernel_build() if config.attention_backend != "reference" else KernelBuild(False)
    selection = select(config.attention_backend, shape, kernels)
    if selection.reason is not None:
        logger.warning("attention backend %s -> reference: %s", config.attention_backend, selection.reason)
    else:
        logger.info("attention backend %s -> %s", config.attention_backend, selection.backend)
    return selection


def enable_flash(backend: AttentionBackend, placement: Placement, head_size: int) -> str:
    """Prefill through FlashAttention 4 where it covers the GPU and model; returns what serves prefill."""
    if not isinstance(backend, CudaKernelBackend):
        return backend.name
    flash = load_flash_attention()
    if isinstance(flash, str):
        gap: str | None = flash
    else:
        capability = torch.cuda.get_device_capability(placement.device)
        gap = flash_gap(capability, placement.dtype_name, head_size)
    if gap is not None or isinstance(flash, str):
        logger.info("prefill attention: the paged CUDA kernel (FlashAttention 4 not used: %s)", gap)
        return "cuda"
    backend.use_flash_for_prefill(flash)
    logger.info("prefill attention: flash-attn-4 %s", flash.version)
    return f"flash-attn-4 {flash.version}"


def build_runner(
    config: EngineConfig, placement: Placement, loaded: LoadedModel, kv: KVPlan, load_tokenizer: Callable[[], Any]
) -> Runner:
    spec = loaded.model.spec
    attention = select_attention(config, placement, spec.head_dim)
    graphs_off = graphs_off_reason(placement.device.type, attention.backend, config.enforce_eager)
    if graphs_off is None and loaded.model.pp is not None:
        graphs_off = "pipeline parallelism (a stage's decode step waits on the stage before)"
    if graphs_off is not None and placement.device.type == "cuda":
        logger.info("CUDA graphs off: %s", graphs_off)
    backend = get_backend(attention.backend)
    prefill_attention = enable_flash(backend, placement, spec.head_dim)
    grammars = GrammarCompiler(load_tokenizer, spec.vocab_size, loaded.eos_token_ids)
    runner = ModelRunner(
        loaded.model, kv.kv_cache, backend, max_num_reqs=kv.limits.max_num_seqs, max_model_len=kv.max_model_len,
        eos_token_ids=loaded.eos_token_ids, dtype=placement.dtype, device=placement.device,
        max_num_tokens=kv.limits.max_num_batched_tokens,
        decode_mode="eager" if graphs_off is not None else "cuda_graphs",
        max_graph_batch=kv.scheduler.max_num_seqs, structured_output=StructuredOutput(grammars), lora=loaded.lora_slots,
    )  # fmt: skip
    runner.capture_graphs()
    return Runner(runner, attention, graphs_off, prefill_attention, grammars)


# ---- all four ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartedRunner:
    placement: Placement
    loaded: LoadedModel
    kv: KVPlan
    runner: Runner


def start_runner(
    config: EngineConfig, folder: Path, *, serving: bool, load_tokenizer: Callable[[], Any], rank: int = 0
) -> StartedRunner:
    """The four stages in order: what the in-process executor and each worker process run."""
    placement = place(config)
    loaded = load_model(config, folder, placement, rank)
    kv = plan_kv(config, loaded.model, placement, serving=serving)
    return StartedRunner(placement, loaded, kv, build_runner(config, placement, loaded, kv, load_tokenizer))
