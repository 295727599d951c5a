"""How the model's layers use the paged KV cache; the contract between the model runner and the KV-cache manager.

Layers are grouped so that every group holds the same number of layers. All groups share one block pool: a
physical block id, while owned by one group, addresses that id in the KV tensors of the group's layers (layer i
of every group uses the i-th shared tensor). A sliding-window group drops blocks that fall wholly out of its
window and hands them back to the pool, where any group can use them (the "hybrid allocator" layout).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FullAttentionSpec:
    block_size: int


@dataclass(frozen=True)
class SlidingWindowSpec:
    block_size: int
    sliding_window: int  # a token attends to itself and the sliding_window - 1 tokens before it


KVCacheSpec = FullAttentionSpec | SlidingWindowSpec


@dataclass(frozen=True)
class KVCacheGroup:
    spec: KVCacheSpec
    layer_names: tuple[str, ...]


@dataclass(frozen=True)
class KVCacheConfig:
    num_blocks: int
    groups: tuple[KVCacheGroup, ...]

    @property
    def block_size(self) -> int:
        return self.groups[0].spec.block_size

    @classmethod
    def single_group(cls, num_blocks: int, block_size: int, num_layers: int = 1) -> KVCacheConfig:
        """A plain full-attention model: one group holding every layer."""
        names = tuple(f"layers.{i}" for i in range(num_layers))
        return cls(num_blocks=num_blocks, groups=(KVCacheGroup(FullAttentionSpec(block_size), names),))
