"""Paged KV-cache layout: per-layer specs, grouping into :class:`KVCacheConfig`, sizing, allocation, binding.

Layers with the same attention kind (full, or a given sliding window) are cut into groups of equal size
(``gcd`` of the per-kind layer counts), so all groups share one block pool and one set of ``group_size`` KV
tensors: layer i of every group uses shared tensor i. A Gemma 3 270M (15 sliding + 3 full layers) gets 6
groups of 3 layers; its sliding groups give back blocks that leave the window, so long sequences hold
fewer blocks than a full-attention layout would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from paged_engine.core.kv_cache_spec import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroup,
    KVCacheSpec,
    SlidingWindowSpec,
)
from paged_engine.models.decoder import DecoderForCausalLM


def layer_specs(model: DecoderForCausalLM, block_size: int) -> list[KVCacheSpec]:
    """One KV-cache spec per layer, in layer order."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    return [
        SlidingWindowSpec(block_size, window) if window else FullAttentionSpec(block_size)
        for window in model.spec.sliding_windows
    ]


def group_layers(specs: list[KVCacheSpec]) -> tuple[KVCacheGroup, ...]:
    """Cut layers into equal-size groups of one spec each (kinds in first-appearance order)."""
    by_spec: dict[KVCacheSpec, list[int]] = {}
    for index, spec in enumerate(specs):
        by_spec.setdefault(spec, []).append(index)
    group_size = math.gcd(*(len(layers) for layers in by_spec.values()))
    groups = []
    for spec, layers in by_spec.items():
        for start in range(0, len(layers), group_size):
            names = tuple(f"layers.{i}" for i in layers[start : start + group_size])
            groups.append(KVCacheGroup(spec, names))
    return tuple(groups)


def bytes_per_block(model: DecoderForCausalLM, group_size: int, block_size: int, dtype: torch.dtype) -> int:
    """Memory one block id costs: keys and values of ``block_size`` tokens in each of the shared tensors."""
    spec = model.spec
    element = torch.tensor([], dtype=dtype).element_size()
    return group_size * 2 * block_size * model.num_local_kv_heads * spec.head_dim * element


def available_memory(device: torch.device) -> int:
    """Free memory in bytes on ``device`` (``MemAvailable`` for the CPU)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo; give the KV-cache budget in bytes")


def resolve_budget(kv_cache_memory: int | float, device: torch.device) -> int:
    """A budget in bytes (int) or as a fraction of free device memory (float in (0, 1])."""
    if isinstance(kv_cache_memory, bool):
        raise TypeError("kv_cache_memory must be a byte count or a fraction, not a bool")
    if isinstance(kv_cache_memory, int):
        if kv_cache_memory <= 0:
            raise ValueError(f"kv_cache_memory must be a positive number of bytes, got {kv_cache_memory}")
        return kv_cache_memory
    if not 0.0 < kv_cache_memory <= 1.0:
        raise ValueError(f"kv_cache_memory as a fraction of free memory must be in (0, 1], got {kv_cache_memory}")
    return int(available_memory(device) * kv_cache_memory)


def blocks_for_one_sequence(groups: tuple[KVCacheGroup, ...], num_tokens: int) -> int:
    """Blocks one sequence of ``num_tokens`` holds at most across all groups (a sliding group never holds
    more than its window's worth, plus one partly covered block)."""
    total = 0
    for group in groups:
        spec = group.spec
        full = -(-num_tokens // spec.block_size)
        if isinstance(spec, SlidingWindowSpec):
            full = min(full, -(-(spec.sliding_window - 1) // spec.block_size) + 1)
        total += full
    return total


@dataclass(frozen=True)
class KVCachePlan:
    config: KVCacheConfig
    group_size: int
    bytes_per_block: int  # of this rank's tensors
    positions: tuple[int, ...]  # the shared tensors this rank holds (a pipeline stage: those of its layers)

    @property
    def total_bytes(self) -> int:
        return self.config.num_blocks * self.bytes_per_block


def plan_kv_cache(
    model: DecoderForCausalLM,
    block_size: int,
    dtype: torch.dtype,
    max_model_len: int,
    kv_cache_memory: int | float | None = None,
    num_blocks: int | None = None,
    device: torch.device | str = "cpu",
) -> KVCachePlan:
    """Size the block pool from a memory budget (or an explicit ``num_blocks``) and check that one sequence of
    ``max_model_len`` tokens fits (block 0 is the reserved null block)."""
    groups = group_layers(layer_specs(model, block_size))
    group_size = len(groups[0].layer_names)
    positions = local_positions(groups, model.layer_range)
    per_block = bytes_per_block(model, len(positions), block_size, dtype)
    if num_blocks is None:
        if kv_cache_memory is None:
            raise ValueError("give either kv_cache_memory (bytes or fraction of free memory) or num_blocks")
        budget = resolve_budget(kv_cache_memory, torch.device(device))
        num_blocks = budget // per_block
    needed = blocks_for_one_sequence(groups, max_model_len) + 1
    if num_blocks < needed:
        raise ValueError(
            f"KV cache of {num_blocks} blocks ({num_blocks * per_block / 2**20:.1f} MiB) cannot hold one sequence "
            f"of max_model_len={max_model_len} tokens, which needs {needed} blocks "
            f"({needed * per_block / 2**20:.1f} MiB); raise the KV-cache memory or lower max_model_len"
        )
    return KVCachePlan(KVCacheConfig(num_blocks=num_blocks, groups=groups), group_size, per_block, positions)


def layer_index(name: str) -> int:
    return int(name.split(".")[1])


def local_positions(groups: tuple[KVCacheGroup, ...], layers: range) -> tuple[int, ...]:
    """The shared-tensor positions some layer in ``layers`` uses (all of them when this rank has every layer)."""
    return tuple(sorted({i for g in groups for i, name in enumerate(g.layer_names) if layer_index(name) in layers}))


def allocate_kv_caches(
    model: DecoderForCausalLM, plan: KVCachePlan, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Allocate the shared (key, value) tensors this rank's layers use and bind each of its attention layers to
    its tensor and group. Zero-filled so never-written slots (the null block) hold finite values."""
    spec = model.spec
    cfg = plan.config
    shape = (cfg.num_blocks, cfg.block_size, model.num_local_kv_heads, spec.head_dim)
    caches = {
        position: (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for position in plan.positions
    }
    layers, first = model.attention_layers, model.layer_range.start
    for group_index, group in enumerate(cfg.groups):
        for position, name in enumerate(group.layer_names):
            if layer_index(name) in model.layer_range:
                layer = layers[layer_index(name) - first]
                layer.kv_cache = caches[position]
                layer.kv_group = group_index
    return list(caches.values())
