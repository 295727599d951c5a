"""The engine core as the server process drives it: built from the CLI's settings, with live budget limits.

The model runner's persistent batch is sized once, at start-up, for ``max_num_seqs_limit`` rows; the live
``max_num_seqs`` budget (admin API, operator's budget tuner) can then move anywhere up to that limit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from paged_engine.core import Request, RequestStatus, SchedulerStats
from paged_engine.core.scheduler_config import check_range
from paged_engine.engine.config import EngineConfig
from paged_engine.engine.engine_core import EngineCore
from paged_engine.loader.default_model import resolve_model
from paged_engine.sampling_params import SamplingParams
from paged_engine.server.core_proc import CoreConfig

log = logging.getLogger(__name__)
MAX_NUM_SEQS_LIMIT_FLOOR = 256
MAX_NUM_BATCHED_TOKENS_LIMIT_FLOOR = 32768


class ServingEngine:
    def __init__(self, core: EngineCore, model_path: Path, config: CoreConfig, max_num_seqs_limit: int) -> None:
        self.core = core
        self.scheduler = core.scheduler
        self.model_path = model_path
        self.config = config
        self.max_num_seqs_limit = max_num_seqs_limit
        self.max_num_batched_tokens_limit = max(MAX_NUM_BATCHED_TOKENS_LIMIT_FLOOR, config.max_num_batched_tokens)

    @classmethod
    def create(cls, config: CoreConfig) -> ServingEngine:
        from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

        torch.manual_seed(config.seed)
        model_path = resolve_model(None if config.model == "default" else config.model,
                                   write_tokenizer=write_gguf_tokenizer_folder)  # fmt: skip
        limit = max(MAX_NUM_SEQS_LIMIT_FLOOR, config.max_num_seqs)
        engine_config = EngineConfig(
            model=str(model_path), dtype="float32" if config.dtype == "auto" else config.dtype,
            attention_backend=config.attention_backend, gemm_backend=config.gemm_backend, block_size=config.block_size,
            kv_cache_memory=config.kv_cache_memory, max_model_len=config.max_model_len, max_num_seqs=limit,
            max_num_batched_tokens=config.max_num_batched_tokens, enable_prefix_caching=config.enable_prefix_caching,
            scheduling_policy=config.scheduling_policy,
        )  # fmt: skip
        core = EngineCore(engine_config, Path(model_path))
        core.scheduler.update_budgets(max_num_seqs=config.max_num_seqs)
        return cls(core, Path(model_path), config, limit)

    def info(self) -> dict[str, Any]:
        plan = self.core.kv_cache_plan
        return {
            "model": self.config.model, "model_path": str(self.model_path), "max_model_len": self.core.max_model_len,
            "num_blocks": plan.config.num_blocks, "block_size": plan.config.block_size,
            "attention_backend": self.core.runner.backend.name, "gemm_backend": self.core.gemm_backend,
            "dtype": str(self.core.config.dtype), "vocab_size": self.core.limits.vocab_size,
            "max_logprobs": self.core.limits.max_logprobs,
            "max_num_seqs": self.scheduler.config.max_num_seqs,
            "max_num_batched_tokens": self.scheduler.config.max_num_batched_tokens,
        }  # fmt: skip

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        priority: int,
        cache_salt: str | None,
    ) -> None:
        self.core.add_request(
            self.core.make_request(request_id, prompt_token_ids, params, arrival_time, priority, cache_salt)
        )

    def abort_requests(self, request_ids: list[str]) -> list[Any]:
        return self.core.abort_requests(request_ids)

    def has_unfinished_requests(self) -> bool:
        return self.core.has_unfinished_requests()

    def step(self) -> list[Any]:
        return self.core.step()

    def is_started(self, request_id: str) -> bool:
        request: Request | None = self.scheduler.get_request(request_id)
        return request is None or request.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED)

    def step_stats(self) -> SchedulerStats | None:
        """The figures of the step just run (gauges and the counters' increments)."""
        return self.core.last_stats

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
        log.info("budgets now: %s", self.budgets())
