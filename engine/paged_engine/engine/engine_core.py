"""The engine core: the pure step loop ``schedule() -> execute_model() -> update_from_output()``.

It owns the scheduler and the model runner and nothing else (no tokenizer, no text), so the offline ``LLM``
calls it in-process and the server runs it in its own process behind a queue.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from paged_engine.attention import get_backend
from paged_engine.core import EngineCoreOutput, Request, Scheduler, SchedulerConfig, SchedulerStats
from paged_engine.engine.config import EngineConfig
from paged_engine.loader.hf import load_hf_model
from paged_engine.models.cpu_gemm import resolve_gemm_backend
from paged_engine.request_limits import RequestLimits
from paged_engine.sampling_params import SamplingParams
from paged_engine.worker.cpu_malloc import keep_freed_memory
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


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
    def __init__(self, config: EngineConfig, model_folder: Path) -> None:
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        if torch.device(config.device).type == "cpu":
            keep_freed_memory()
        self.config = config
        model, hf_config = load_hf_model(model_folder, dtype=config.torch_dtype, device=config.device)
        self.gemm_backend = resolve_gemm_backend(config.gemm_backend, torch.device(config.device), config.torch_dtype)
        if self.gemm_backend == "packed":
            model.pack_weights_for_cpu()
        logger.info("GEMM backend: %s", self.gemm_backend)
        self.model = model
        self.eos_token_ids = eos_token_ids(model_folder, hf_config)
        self.max_model_len = config.max_model_len or model.spec.max_position_embeddings
        plan = plan_kv_cache(
            model,
            config.block_size,
            config.torch_dtype,
            self.max_model_len,
            kv_cache_memory=config.kv_cache_memory,
            num_blocks=config.num_kv_blocks,
            device=config.device,
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
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
                max_model_len=self.max_model_len,
                long_prefill_token_threshold=config.long_prefill_token_threshold,
                enable_prefix_caching=config.enable_prefix_caching,
                policy=config.scheduling_policy,
            ),
            plan.config,
        )
        self.runner = ModelRunner(
            model,
            plan,
            get_backend(config.attention_backend),
            max_num_reqs=config.max_num_seqs,
            max_model_len=self.max_model_len,
            eos_token_ids=self.eos_token_ids,
            dtype=config.torch_dtype,
            device=config.device,
        )
        self.limits = RequestLimits(model.spec.vocab_size, self.max_model_len, config.max_logprobs)
        self.last_stats: SchedulerStats | None = None
        self.num_preemptions = 0

    def add_request(self, request: Request) -> None:
        """Queue ``request``; invalid ones raise (``RequestValidationError``) and change nothing. The front-ends
        check the same limits first; checking again here keeps any request that reaches the core from failing
        inside a step."""
        self.limits.check(request.prompt_token_ids, request.sampling_params)
        self.scheduler.add_request(request)

    def make_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float | None = None,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> Request:
        """A core request ending at this model's EOS. A request holds one EOS id, so the model's other end
        tokens (e.g. Gemma's ``<end_of_turn>``) become stop tokens unless ``ignore_eos`` is set."""
        extra_eos = [t for t in self.eos_token_ids[1:] if t not in params.stop_token_ids]
        if extra_eos and not params.ignore_eos:
            params = dataclasses.replace(params, stop_token_ids=[*params.stop_token_ids, *extra_eos])
        eos = self.eos_token_ids[0] if self.eos_token_ids else None
        return Request(request_id, prompt_token_ids, params, eos_token_id=eos, arrival_time=arrival_time,
                       priority=priority, cache_salt=cache_salt)  # fmt: skip

    def abort_requests(self, request_ids: Iterable[str]) -> list[EngineCoreOutput]:
        return self.scheduler.abort(request_ids)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def step(self) -> list[EngineCoreOutput]:
        """One scheduler step and one forward pass; returns what changed per request."""
        scheduler_output = self.scheduler.schedule()
        runner_output = self.runner.execute_model(scheduler_output)
        result = self.scheduler.update_from_output(scheduler_output, runner_output)
        self.last_stats = result.stats
        self.num_preemptions += result.stats.num_preemptions
        return result.outputs
