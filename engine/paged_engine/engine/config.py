"""Engine settings in one validated place; the offline ``LLM`` and the server build their engine from this."""

from __future__ import annotations

from dataclasses import dataclass

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class EngineConfig:
    model: str | None = None  # model folder, .gguf file, or None for the default (Gemma 3 270M)
    dtype: str = "float32"  # fp32 is fastest on CPUs without native bf16
    device: str = "cpu"
    attention_backend: str = "auto"  # the CUDA or CPU kernels where they build, else the torch reference
    gemm_backend: str = "auto"  # "packed" (weights pre-packed, CPU) where it runs, else "torch"
    block_size: int = 16
    kv_cache_memory: int | float = 1 << 30  # bytes, or a fraction (0, 1] of free memory
    num_kv_blocks: int | None = None  # overrides kv_cache_memory (tests)
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"  # or "priority": lower Request.priority first, then arrival order
    num_threads: int | None = None  # torch intra-op threads; None leaves torch's default
    max_logprobs: int = 20  # top-N logprobs a request may ask for, per sampled or prompt position

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if not 1 <= self.block_size <= 1024:
            raise ValueError(f"block_size must be in [1, 1024], got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ValueError(f"num_kv_blocks must be at least 2 (block 0 is reserved), got {self.num_kv_blocks}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be at least 1, got {self.max_model_len}")
        if not 0 <= self.max_logprobs <= 1024:
            raise ValueError(f"max_logprobs must be in [0, 1024], got {self.max_logprobs}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]
