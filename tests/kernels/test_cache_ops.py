"""paged::reshape_and_cache and paged::copy_blocks (CPU) against the reference."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops

from . import reference

pytestmark = pytest.mark.usefixtures("kernels")


def caches(num_blocks: int = 6, block_size: int = 4, kv_heads: int = 2, head_dim: int = 8, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    shape = (num_blocks, block_size, kv_heads, head_dim)
    return torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reshape_and_cache_writes_slots_and_skips_minus_one(dtype: torch.dtype) -> None:
    key_cache, value_cache = caches(dtype=dtype)
    key = torch.randn(5, 2, 8).to(dtype)
    value = torch.randn(5, 2, 8).to(dtype)
    slots = torch.tensor([3, -1, 4, 23, 0], dtype=torch.int64)  # crosses a block boundary (3 -> 4); 23 = last slot
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    reference.reshape_and_cache(key, value, expected_k, expected_v, slots)
    ops.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_reshape_and_cache_accepts_strided_views() -> None:
    """key/value arrive as views into a fused qkv projection: strided over tokens and heads."""
    key_cache, value_cache = caches()
    qkv = torch.randn(3, 3, 2, 8)
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.tensor([7, 1, 12])
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    reference.reshape_and_cache(key, value, expected_k, expected_v, slots)
    ops.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_reshape_and_cache_no_tokens() -> None:
    key_cache, value_cache = caches()
    before = key_cache.clone()
    empty = torch.empty(0, 2, 8)
    ops.reshape_and_cache(empty, empty, key_cache, value_cache, torch.empty(0, dtype=torch.int64))
    assert torch.equal(key_cache, before)


def test_copy_blocks_copies_every_layer() -> None:
    layers = [caches() for _ in range(3)]
    keys = [k for k, _ in layers]
    values = [v for _, v in layers]
    mapping = torch.tensor([[1, 4], [2, 0], [1, 5]], dtype=torch.int64)
    expected_k = [k.clone() for k in keys]
    expected_v = [v.clone() for v in values]
    reference.copy_blocks(expected_k, expected_v, mapping)
    ops.copy_blocks(keys, values, mapping)
    for got, want in zip(keys + values, expected_k + expected_v, strict=True):
        assert torch.equal(got, want)


def test_copy_blocks_empty_mapping_is_a_no_op() -> None:
    key_cache, value_cache = caches()
    before = key_cache.clone()
    ops.copy_blocks([key_cache], [value_cache], torch.empty(0, 2, dtype=torch.int64))
    assert torch.equal(key_cache, before)
