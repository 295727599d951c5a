"""The engine core: the pure step loop ``schedule() -> execute_model() -> update_from_output()``.

It owns the scheduler and the model runner and nothing else (no tokenizer, no text), so the offline ``LLM``
calls it in-process and the server runs it in its own process (``core_proc.py``) behind ZMQ. Built from the
one ``EngineConfig`` in four named stages (``startup``): device, model and adapters, KV plan, runner.

Live budgets: the model runner's persistent batch is sized once, at start-up, for the live limits
(``SchedulerConfig.live_limits``, the engine contract's rule); the budgets (admin API, the operator's budget tuner)
then move anywhere up to them, and "tokens >= sequences" holds throughout.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from paged_platform.engine_contract.budgets import Budgets

from paged_engine.core import (
    EngineCoreOutput,
    Request,
    RequestStatus,
    RequestValidationError,
    Scheduler,
    SchedulerStats,
)
from paged_engine.engine import startup
from paged_engine.engine.config import EngineConfig
from paged_engine.executor.in_process import InProcessExecutor
from paged_engine.executor.select import make_executor
from paged_engine.lora.registry import LoraError
from paged_engine.request_limits import RequestLimits
from paged_engine.sampling_params import SamplingParams
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.wire import EngineInfo, LoraInfo
from paged_engine.worker.step_timing import StepClock

if TYPE_CHECKING:
    from paged_engine.tokenizer import FastTokenizer
    from paged_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, config: EngineConfig, model_folder: Path | None = None, *, serving: bool = False) -> None:
        """``serving``: for the API server (its token budget default differs on a CPU: the engine contract)."""
        self.config = config
        self.model_folder = model_folder if model_folder is not None else startup.resolve_model_folder(config)
        self.executor = make_executor(config, self.model_folder, serving=serving, load_tokenizer=self._load_tokenizer)
        try:
            report = self.executor.report
            self.report, self.eos_token_ids, self.max_model_len = report, report.eos_token_ids, report.max_model_len
            scheduler = startup.resolve_scheduler(config, report.device.split(":")[0], serving, report.max_model_len)
            self.budget_limits = scheduler.live_limits()
            self.scheduler = Scheduler(scheduler, report.kv_cache_config())
            self.grammars = self._grammars()
            for module in config.lora_modules:
                self.load_lora(module.name, module.path)
        except BaseException:
            self.executor.shutdown()
            raise
        self.limits = RequestLimits(report.vocab_size, self.max_model_len, config.max_logprobs)
        self.last_stats: SchedulerStats | None = None
        self.num_preemptions = 0

    def _grammars(self) -> GrammarCompiler:
        """The runner's compiler in one process; the core's own (it refuses invalid schemas) beside workers."""
        if isinstance(self.executor, InProcessExecutor):
            return self.executor.grammars
        return GrammarCompiler(self._load_tokenizer, self.report.vocab_size, self.eos_token_ids)

    @property
    def runner(self) -> ModelRunner:
        """The model runner, where it runs in this process (world size 1)."""
        if not isinstance(self.executor, InProcessExecutor):
            raise AttributeError("the model runs in worker processes (world size above 1)")
        return self.executor.runner

    def _load_tokenizer(self) -> FastTokenizer:
        from paged_engine.tokenizer import load_tokenizer

        return load_tokenizer(self.model_folder)

    def shutdown(self) -> None:
        """Stop the worker processes, if any."""
        self.executor.shutdown()

    def check_health(self) -> None:
        """Raise if a worker process has died (an idle engine calls this; a step finds out by itself)."""
        self.executor.check_health()

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
            loras = self.executor.loras
            lora = loras.get(lora_name) if loras is not None else None
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

    def load_lora(self, name: str, path: str) -> LoraInfo:
        """Load the PEFT adapter at ``path`` as ``name`` into a free slot; refusals (:class:`LoraError`) name
        the limit and change nothing."""
        return self.executor.load_lora(name, path)

    def unload_lora(self, name: str) -> None:
        """Unload ``name``; refused while requests using it are unfinished (their rows read its slot)."""
        loras = self.executor.loras
        if loras is None:
            raise LoraError(f"no adapter named {name!r} is loaded (LoRA is off)", 404, "name")
        lora = loras.get(name)
        if lora is None:
            raise LoraError(f"no adapter named {name!r} is loaded", 404, "name")
        users = sum(r.adapter_id == lora.cache_id for r in self.scheduler.requests.values())
        if users:
            raise LoraError(f"adapter {name!r} serves {users} unfinished requests; retry when they are done", 409)
        loras.remove(name)
        self.executor.unload_lora(lora.cache_id)
        logger.info("LoRA adapter %r unloaded", name)

    def loaded_loras(self) -> list[LoraInfo]:
        """The adapters loaded now, as the API server lists them."""
        loras = self.executor.loras
        loaded = loras.loaded() if loras is not None else []
        return [LoraInfo(x.name, x.path, x.rank, x.slot) for x in loaded]

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
        runner_output = self.executor.execute_model(scheduler_output)
        clock.skip(self.executor.last_phases())
        result = self.scheduler.update_from_output(scheduler_output, runner_output)
        clock.lap("update")
        self.last_stats = dataclasses.replace(result.stats, step_phases=clock.phases)
        self.num_preemptions += result.stats.num_preemptions
        return result.outputs

    # ---- state for the server and the admin API ----

    def info(self) -> EngineInfo:
        r, config = self.report, self.config
        return EngineInfo(
            model=config.model or "default", model_path=str(self.model_folder), max_model_len=self.max_model_len,
            vocab_size=self.limits.vocab_size, max_logprobs=self.limits.max_logprobs, num_blocks=r.num_blocks,
            block_size=r.block_size, device=r.device, dtype=r.dtype, attention_backend=r.attention_backend,
            attention_fallback=r.attention_fallback, prefill_attention=r.prefill_attention, cuda_graphs=r.cuda_graphs,
            gemm_backend=r.gemm_backend, cpu_isas=dict(r.cpu_isas), cpu_bf16_gemm=r.cpu_bf16_gemm,
            budgets=self.budgets(), limits=self.budget_limits, lora_enabled=self.executor.loras is not None,
            max_loras=config.max_loras, max_lora_rank=config.max_lora_rank, loras=self.loaded_loras(),
            tensor_parallel_size=config.tensor_parallel_size, pipeline_parallel_size=config.pipeline_parallel_size,
            data_parallel_size=config.data_parallel_size,
            world_size=config.world_size,
            collective_backend=r.collective_backend,
        )  # fmt: skip

    def current_stats(self) -> SchedulerStats:
        """Gauges as they are now, between steps (after aborts), with no counter increments."""
        s = self.scheduler
        return SchedulerStats(
            num_running=s.num_running, num_waiting=s.num_waiting, kv_cache_usage=s.kv.usage, num_preemptions=0,
            prefix_cache_queries=0, prefix_cache_hits=0, num_scheduled_tokens=0, num_prompt_tokens=0,
            num_generation_tokens=0, max_num_seqs=s.config.max_num_seqs,
            max_num_batched_tokens=s.config.max_num_batched_tokens,
        )  # fmt: skip

    def budgets(self) -> Budgets:
        return self.scheduler.config.budgets

    def set_budgets(self, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> Budgets:
        """Both or none: the pair that would result must hold the contract's rules and this engine's live limits
        (a ``SettingError`` names the field at fault and the limit); returns the budgets in force."""
        current = self.budgets()
        wanted = Budgets(
            current.max_num_seqs if max_num_seqs is None else max_num_seqs,
            current.max_num_batched_tokens if max_num_batched_tokens is None else max_num_batched_tokens,
        )
        self.budget_limits.check(wanted)
        self.scheduler.update_budgets(
            max_num_seqs=wanted.max_num_seqs, max_num_batched_tokens=wanted.max_num_batched_tokens
        )
        logger.info("budgets now: %s (live limits %s)", wanted.describe(), self.budget_limits)
        return wanted
