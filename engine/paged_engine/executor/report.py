"""What an executor tells the engine core once its runners are built: the KV pool every rank agreed on and what
``EngineInfo`` shows. A msgspec struct, torch-free: it crosses from a worker process as it is."""

from __future__ import annotations

import msgspec

from paged_engine.core.kv_cache_spec import FullAttentionSpec, KVCacheConfig, KVCacheGroup, SlidingWindowSpec


class KVGroupLayout(msgspec.Struct, array_like=True):
    layer_names: list[str]
    sliding_window: int | None  # None: full attention


class RunnerReport(msgspec.Struct):
    num_blocks: int
    block_size: int
    groups: list[KVGroupLayout]
    max_model_len: int
    vocab_size: int
    eos_token_ids: list[int]
    device: str
    dtype: str
    attention_backend: str
    attention_fallback: str
    prefill_attention: str
    cuda_graphs: str
    gemm_backend: str
    cpu_isas: dict[str, str]
    cpu_bf16_gemm: str
    collective_backend: str  # "none" in one process

    def kv_cache_config(self) -> KVCacheConfig:
        groups = tuple(
            KVCacheGroup(
                FullAttentionSpec(self.block_size) if g.sliding_window is None
                else SlidingWindowSpec(self.block_size, g.sliding_window),
                tuple(g.layer_names),
            )
            for g in self.groups
        )  # fmt: skip
        return KVCacheConfig(self.num_blocks, groups)


def group_layouts(config: KVCacheConfig) -> list[KVGroupLayout]:
    return [
        KVGroupLayout(list(g.layer_names), g.spec.sliding_window if isinstance(g.spec, SlidingWindowSpec) else None)
        for g in config.groups
    ]
