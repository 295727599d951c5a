"""The in-process executor (world size 1): the model runner lives in the engine-core process, as ``LLM`` and the
server have always run it; a step is a direct call. LoRA adapters are loaded here, into the runner's slots."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paged_engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from paged_engine.engine import startup
from paged_engine.engine.config import EngineConfig
from paged_engine.executor.report import RunnerReport, group_layouts
from paged_engine.lora.adapter import read_rank
from paged_engine.lora.registry import LoadedLora, LoraError, LoraRegistry
from paged_engine.wire import LoraInfo

logger = logging.getLogger(__name__)


def add_adapter(registry: LoraRegistry, name: str, path: str, install: Callable[[LoadedLora], object]) -> LoraInfo:
    """Register ``name`` in a free slot and have ``install`` read it into that slot (every rank's, under tensor
    parallelism); a refusal of either leaves the registry as it was."""
    lora = registry.add(name, str(path), read_rank(path))  # cheap refusals before the weights are read
    try:
        install(lora)
    except BaseException:
        registry.remove(name)
        raise
    logger.info("LoRA adapter %r loaded from %s (rank %d, slot %d)", name, path, lora.rank, lora.slot)
    return LoraInfo(lora.name, lora.path, lora.rank, lora.slot)


def runner_report(built: startup.StartedRunner, collective_backend: str = "none") -> RunnerReport:
    placement, kv, runner = built.placement, built.kv, built.runner
    blocks = kv.kv_cache.config
    return RunnerReport(
        num_blocks=blocks.num_blocks, block_size=blocks.block_size, groups=group_layouts(blocks),
        max_model_len=kv.max_model_len, vocab_size=built.loaded.model.spec.vocab_size,
        eos_token_ids=list(built.loaded.eos_token_ids), device=str(placement.device), dtype=placement.dtype_name,
        attention_backend=runner.runner.backend.name, attention_fallback=runner.attention.reason or "",
        prefill_attention=runner.prefill_attention, cuda_graphs="off" if runner.graphs_off is not None else "on",
        gemm_backend=built.loaded.gemm_backend, cpu_isas=dict(placement.cpu_isas),
        cpu_bf16_gemm=placement.cpu_bf16_gemm, collective_backend=collective_backend,
    )  # fmt: skip


class InProcessExecutor:
    def __init__(
        self, config: EngineConfig, model_folder: Path, *, serving: bool, load_tokenizer: Callable[[], Any]
    ) -> None:
        self.built = startup.start_runner(config, model_folder, serving=serving, load_tokenizer=load_tokenizer)
        self.report = runner_report(self.built)
        self.runner = self.built.runner.runner
        self.grammars = self.built.runner.grammars
        self.loras: LoraRegistry | None = self.built.loaded.loras

    @property
    def model(self) -> Any:
        return self.built.loaded.model

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        return self.runner.execute_model(scheduler_output)

    def last_phases(self) -> dict[str, float]:
        return self.runner.last_phases

    def load_lora(self, name: str, path: str) -> LoraInfo:
        slots = self.built.loaded.lora_slots
        if self.loras is None or slots is None:
            raise LoraError("LoRA is off: start the engine with --enable-lora or --lora-modules", 409)
        return add_adapter(self.loras, name, path, lambda lora: slots.load_folder(lora.slot, lora.cache_id, path))

    def unload_lora(self, cache_id: str) -> None:
        assert self.built.loaded.lora_slots is not None
        self.built.loaded.lora_slots.unload(cache_id)

    def check_health(self) -> None:
        """Nothing runs apart from this process: alive while it is."""

    def shutdown(self) -> None:
        """Nothing runs apart from this process."""
