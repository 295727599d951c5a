"""The engine core: the pure step loop ``schedule() -> execute_model() -> update_from_output()``.

It owns the scheduler and the model runner and nothing else (no tokenizer, no text), so the offline ``LLM``
calls it in-process and the server runs it in its own process (``core_proc.py``) behind ZMQ. Built from the
one ``EngineConfig``: device and dtype resolved, the attention backend chosen for what the kernels cover.

Live budgets: the model runner's persistent batch is sized once, at start-up, for ``max_num_seqs_limit`` rows;
the live ``max_num_seqs`` budget (admin API, the operator's budget tuner) then moves anywhere up to that limit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from paged_engine.attention import get_backend
from paged_engine.attention.backend import AttentionBackend
from paged_engine.attention.cuda import CudaKernelBackend
from paged_engine.attention.flash import load_flash_attention
from paged_engine.attention.selection import AttentionShape, KernelBuild, Selection, flash_gap, select
from paged_engine.core import (
    EngineCoreOutput,
    Request,
    RequestStatus,
    RequestValidationError,
    Scheduler,
    SchedulerStats,
)
from paged_engine.core.scheduler_config import check_range, with_default_budget
from paged_engine.engine.config import EngineConfig
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
from paged_engine.kernels.cpu_isa import bf16_gemm_unit, cap_cpu_isa, describe_isas
from paged_engine.loader.default_model import resolve_model
from paged_engine.loader.hf import load_hf_model
from paged_engine.lora.adapter import load_adapter, read_rank
from paged_engine.lora.layers import LoraSlots
from paged_engine.lora.registry import LoraError, LoraRegistry
from paged_engine.models.cpu_gemm import resolve_gemm_backend
from paged_engine.request_limits import RequestLimits
from paged_engine.sample import StructuredOutput
from paged_engine.sampling_params import SamplingParams
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.worker.cpu_malloc import keep_freed_memory
from paged_engine.worker.cuda_graphs import graphs_off_reason
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner
from paged_engine.worker.step_timing import StepClock

if TYPE_CHECKING:
    from paged_engine.tokenizer import FastTokenizer

logger = logging.getLogger(__name__)
MAX_NUM_SEQS_LIMIT_FLOOR = 256
MAX_NUM_BATCHED_TOKENS_LIMIT_FLOOR = 32768
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_folder(config: EngineConfig) -> Path:
    """The model's Hugging Face folder (the default model and GGUF files are converted into a cache once)."""
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    return Path(resolve_model(config.model, write_tokenizer=write_gguf_tokenizer_folder, revision=config.revision))


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
    AVX512-BF16 or AMX, misses the 99 % top-1 agreement bar (98 % on Gemma 3 270M; docs/benchmarks.md)."""
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


def kernel_build() -> KernelBuild:
    try:
        ext = ops.load()
    except ops.KernelBuildError as exc:
        return KernelBuild(False, why_unavailable=str(exc))
    return KernelBuild(True, with_cuda=ext.with_cuda)


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


class EngineCore:
    def __init__(self, config: EngineConfig, model_folder: Path | None = None, *, serving: bool = False) -> None:
        """``serving``: for the API server (its token budget default differs on a CPU, see SchedulerConfig)."""
        self.config = config
        self.model_folder = model_folder if model_folder is not None else resolve_model_folder(config)
        torch.manual_seed(config.seed)
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.cpu_isas = apply_cpu_isa(config.cpu_isa, self.dtype)
        self.cpu_bf16_gemm = bf16_gemm_unit() if self.device.type == "cpu" else "none"
        if self.device.type == "cpu":
            logger.info("bf16 GEMMs (oneDNN) run on: %s", self.cpu_bf16_gemm)
        if self.device.type == "cpu":
            keep_freed_memory()
        model, hf_config = load_hf_model(self.model_folder, dtype=self.dtype, device=self.device)
        self.gemm_backend = resolve_gemm_backend(config.gemm_backend, self.device, self.dtype)
        if self.gemm_backend == "packed":
            model.pack_weights_for_cpu()
        logger.info("device %s, dtype %s, GEMM backend %s", self.device, str(self.dtype).removeprefix("torch."),
                    self.gemm_backend)  # fmt: skip
        if config.greedy_head == "auto" and self.gemm_backend == "packed":
            reason = model.use_rescored_greedy()
            logger.info("greedy head: %s", (reason and f"fp32 ({reason})") or "bf16 candidates, fp32 rescoring")
        self.model = model
        # LoRA slots are allocated before the KV cache is sized, so a fractional budget counts them
        self.lora_slots: LoraSlots | None = None
        self.loras: LoraRegistry | None = None
        if config.lora_enabled:
            self.lora_slots = LoraSlots(model, config.max_loras, config.max_lora_rank, self.dtype, self.device)
            self.loras = LoraRegistry(config.max_loras, config.max_lora_rank)
            logger.info("LoRA: %d slots of rank %d, %.1f MiB", config.max_loras, config.max_lora_rank,
                        self.lora_slots.nbytes / 2**20)  # fmt: skip
        self.eos_token_ids = eos_token_ids(self.model_folder, hf_config)
        scheduler_config = with_default_budget(config.scheduler, self.device.type, serving)
        self.max_model_len = scheduler_config.max_model_len or model.spec.max_position_embeddings
        plan = plan_kv_cache(
            model,
            config.block_size,
            self.dtype,
            self.max_model_len,
            kv_cache_memory=config.kv_cache_memory,
            num_blocks=config.num_kv_blocks,
            device=self.device,
        )
        logger.info(
            "KV cache: %d blocks of %d tokens, %d groups of %d layers, %.1f MiB",
            plan.config.num_blocks,
            plan.config.block_size,
            len(plan.config.groups),
            plan.group_size,
            plan.total_bytes / 2**20,
        )
        self.kv_cache_plan = plan
        self.max_num_seqs_limit = max(MAX_NUM_SEQS_LIMIT_FLOOR, scheduler_config.max_num_seqs)
        self.max_num_batched_tokens_limit = max(
            MAX_NUM_BATCHED_TOKENS_LIMIT_FLOOR, scheduler_config.max_num_batched_tokens
        )
        self.scheduler = Scheduler(dataclasses.replace(scheduler_config, max_model_len=self.max_model_len), plan.config)
        logger.info("scheduler budget: %d tokens and %d sequences per step", scheduler_config.max_num_batched_tokens,
                    scheduler_config.max_num_seqs)  # fmt: skip
        self.attention = self._select_attention(model.spec.head_dim)
        self.graphs_off = graphs_off_reason(self.device.type, self.attention.backend, config.enforce_eager)
        if self.graphs_off is not None and self.device.type == "cuda":
            logger.info("CUDA graphs off: %s", self.graphs_off)
        backend = get_backend(self.attention.backend)
        self.prefill_attention = self._enable_flash(backend, model.spec.head_dim)
        self.grammars = GrammarCompiler(self._load_tokenizer, model.spec.vocab_size, self.eos_token_ids)
        self.runner = ModelRunner(
            model,
            plan,
            backend,
            max_num_reqs=self.max_num_seqs_limit,
            max_model_len=self.max_model_len,
            eos_token_ids=self.eos_token_ids,
            dtype=self.dtype,
            device=self.device,
            max_num_tokens=self.max_num_batched_tokens_limit,
            decode_mode="eager" if self.graphs_off is not None else "cuda_graphs",
            max_graph_batch=scheduler_config.max_num_seqs,
            structured_output=StructuredOutput(self.grammars),
            lora=self.lora_slots,
        )
        self.runner.capture_graphs()
        for module in config.lora_modules:
            self.load_lora(module.name, module.path)
        self.limits = RequestLimits(model.spec.vocab_size, self.max_model_len, config.max_logprobs)
        self.last_stats: SchedulerStats | None = None
        self.num_preemptions = 0

    def _load_tokenizer(self) -> FastTokenizer:
        from paged_engine.tokenizer import load_tokenizer

        return load_tokenizer(self.model_folder)

    def _select_attention(self, head_size: int) -> Selection:
        dtype = str(self.dtype).removeprefix("torch.")
        shape = AttentionShape(self.device.type, dtype, head_size, self.config.block_size)
        kernels = kernel_build() if self.config.attention_backend != "reference" else KernelBuild(False)
        selection = select(self.config.attention_backend, shape, kernels)
        if selection.reason is not None:
            logger.warning("attention backend %s -> reference: %s", self.config.attention_backend, selection.reason)
        else:
            logger.info("attention backend %s -> %s", self.config.attention_backend, selection.backend)
        return selection

    def _enable_flash(self, backend: AttentionBackend, head_size: int) -> str:
        """Prefill through FlashAttention 4 where it covers the GPU and model; returns what serves prefill."""
        if not isinstance(backend, CudaKernelBackend):
            return backend.name
        flash = load_flash_attention()
        if isinstance(flash, str):
            gap: str | None = flash
        else:
            capability = torch.cuda.get_device_capability(self.device)
            gap = flash_gap(capability, str(self.dtype).removeprefix("torch."), head_size)
        if gap is not None or isinstance(flash, str):
            logger.info("prefill attention: the paged CUDA kernel (FlashAttention 4 not used: %s)", gap)
            return "cuda"
        backend.use_flash_for_prefill(flash)
        logger.info("prefill attention: flash-attn-4 %s", flash.version)
        return f"flash-attn-4 {flash.version}"

    # ---- requests ----

    def add_request(self, request: Request) -> None:
        """Queue ``request``; invalid ones raise (``RequestValidationError``) and change nothing. The front-ends
        check the same limits first; checking again here keeps any request that reaches the core from failing
        inside a step."""
        self.limits.check(request.prompt_token_ids, request.sampling_params)
        if request.sampling_params.structured_output is not None:
            self.grammars.compile(request.sampling_params.structured_output)  # refused here if it is invalid
        self.scheduler.add_request(request)

    def make_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float | None = None,
        priority: int = 0,
        cache_salt: str | None = None,
        lora_name: str | None = None,
    ) -> Request:
        """A core request ending at this model's EOS. A request holds one EOS id, so the model's other end
        tokens (e.g. Gemma's ``<end_of_turn>``) become stop tokens unless ``ignore_eos`` is set. ``lora_name``
        picks a loaded adapter; its cache id keys the request's prefix-cache blocks."""
        adapter_id = None
        if lora_name is not None:
            lora = self.loras.get(lora_name) if self.loras is not None else None
            if lora is None:
                raise RequestValidationError("model", f"no LoRA adapter named {lora_name!r} is loaded")
            adapter_id = lora.cache_id
        extra_eos = [t for t in self.eos_token_ids[1:] if t not in params.stop_token_ids]
        if extra_eos and not params.ignore_eos:
            params = dataclasses.replace(params, stop_token_ids=[*params.stop_token_ids, *extra_eos])
        eos = self.eos_token_ids[0] if self.eos_token_ids else None
        return Request(request_id, prompt_token_ids, params, eos_token_id=eos, arrival_time=arrival_time,
                       priority=priority, cache_salt=cache_salt, adapter_id=adapter_id)  # fmt: skip

    # ---- LoRA adapters ----

    def load_lora(self, name: str, path: str) -> dict[str, Any]:
        """Load the PEFT adapter at ``path`` as ``name`` into a free slot; refusals (:class:`LoraError`) name
        the limit and change nothing."""
        if self.loras is None or self.lora_slots is None:
            raise LoraError("LoRA is off: start the engine with --enable-lora or --lora-modules", 409)
        self.loras.check_load(name, read_rank(path))  # cheap refusals before the weights are read
        adapter = load_adapter(path, self.model.spec, self.dtype)
        lora = self.loras.add(name, str(path), adapter.rank)
        self.lora_slots.load(lora.slot, lora.cache_id, adapter)
        logger.info("LoRA adapter %r loaded from %s (rank %d, slot %d)", name, path, lora.rank, lora.slot)
        return self.lora_info(name)

    def unload_lora(self, name: str) -> dict[str, Any]:
        """Unload ``name``; refused while requests using it are unfinished (their rows read its slot)."""
        if self.loras is None or self.lora_slots is None:
            raise LoraError(f"no adapter named {name!r} is loaded (LoRA is off)", 404, "name")
        lora = self.loras.get(name)
        if lora is None:
            raise LoraError(f"no adapter named {name!r} is loaded", 404, "name")
        users = sum(r.adapter_id == lora.cache_id for r in self.scheduler.requests.values())
        if users:
            raise LoraError(f"adapter {name!r} serves {users} unfinished requests; retry when they are done", 409)
        self.loras.remove(name)
        self.lora_slots.unload(lora.cache_id)
        logger.info("LoRA adapter %r unloaded", name)
        return {"name": name, "unloaded": True}

    def lora_info(self, name: str | None = None) -> Any:
        """One loaded adapter (``name``) or all of them, as the API server lists them."""
        loaded = self.loras.loaded() if self.loras is not None else []
        rows = [{"name": x.name, "path": x.path, "rank": x.rank, "slot": x.slot} for x in loaded]
        return next(r for r in rows if r["name"] == name) if name is not None else rows

    def abort_requests(self, request_ids: Iterable[str]) -> list[EngineCoreOutput]:
        return self.scheduler.abort(request_ids)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def is_started(self, request_id: str) -> bool:
        """Whether the scheduler has taken ``request_id`` out of the waiting queue (or is done with it)."""
        request: Request | None = self.scheduler.get_request(request_id)
        return request is None or request.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED)

    def step(self) -> list[EngineCoreOutput]:
        """One scheduler step and one forward pass; returns what changed per request."""
        clock = StepClock()
        scheduler_output = self.scheduler.schedule()
        clock.lap("schedule")
        runner_output = self.runner.execute_model(scheduler_output)
        clock.skip(self.runner.last_phases)
        result = self.scheduler.update_from_output(scheduler_output, runner_output)
        clock.lap("update")
        self.last_stats = dataclasses.replace(result.stats, step_phases=clock.phases)
        self.num_preemptions += result.stats.num_preemptions
        return result.outputs

    # ---- state for the server and the admin API ----

    def info(self) -> dict[str, Any]:
        plan = self.kv_cache_plan
        config = self.scheduler.config
        return {
            "model": self.config.model or "default", "model_path": str(self.model_folder),
            "max_model_len": self.max_model_len, "num_blocks": plan.config.num_blocks,
            "block_size": plan.config.block_size, "device": str(self.device),
            "attention_backend": self.runner.backend.name, "attention_fallback": self.attention.reason or "",
            "prefill_attention": self.prefill_attention, "cuda_graphs": "off" if self.graphs_off is not None else "on",
            **{f"cpu_isa_{family}": isa for family, isa in self.cpu_isas.items()},
            "cpu_bf16_gemm": self.cpu_bf16_gemm,
            "gemm_backend": self.gemm_backend, "dtype": str(self.dtype).removeprefix("torch."),
            "vocab_size": self.limits.vocab_size, "max_logprobs": self.limits.max_logprobs,
            "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": config.max_num_batched_tokens,
            "lora_enabled": self.loras is not None, "max_loras": self.config.max_loras,
            "max_lora_rank": self.config.max_lora_rank, "loras": self.lora_info(),
        }  # fmt: skip

    def current_stats(self) -> SchedulerStats:
        """Gauges as they are now, between steps (after aborts), with no counter increments."""
        s = self.scheduler
        return SchedulerStats(
            num_running=s.num_running, num_waiting=s.num_waiting, kv_cache_usage=s.kv.usage, num_preemptions=0,
            prefix_cache_queries=0, prefix_cache_hits=0, num_scheduled_tokens=0, num_prompt_tokens=0,
            num_generation_tokens=0, max_num_seqs=s.config.max_num_seqs,
            max_num_batched_tokens=s.config.max_num_batched_tokens,
        )  # fmt: skip

    def budgets(self) -> dict[str, Any]:
        config = self.scheduler.config
        return {
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": config.max_num_batched_tokens,
            "limits": {
                "max_num_seqs": [1, self.max_num_seqs_limit],
                "max_num_batched_tokens": [1, self.max_num_batched_tokens_limit],
            },
        }

    def set_budgets(self, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> None:
        """Validates against this engine's limits (the scheduler then checks its own) and applies both or none."""
        if max_num_seqs is not None:
            check_range("max_num_seqs", max_num_seqs, 1, self.max_num_seqs_limit)
        if max_num_batched_tokens is not None:
            check_range("max_num_batched_tokens", max_num_batched_tokens, 1, self.max_num_batched_tokens_limit)
        self.scheduler.update_budgets(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
        logger.info("budgets now: %s", self.budgets())
