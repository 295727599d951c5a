"""The torch reference backend against dense causal attention on unpaged tensors."""

from __future__ import annotations

import math

import pytest
import torch
from paged_engine.attention import available_backends, get_backend

BLOCK = 4


def dense_attention(q, k, v, scale, window=-1, soft_cap=0.0):
    """q: [q_len, H, d] (the last q_len positions), k/v: [seq_len, KVH, d]."""
    q_len, seq_len = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    qpos = torch.arange(seq_len - q_len, seq_len)[:, None]
    kpos = torch.arange(seq_len)[None, :]
    allowed = kpos <= qpos
    if window > 0:
        allowed &= kpos > qpos - window
    scores = scores.masked_fill(~allowed, -math.inf)
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def scatter_to_cache(backend, ks, vs, num_blocks, rng):
    """Write each sequence's K/V into shuffled blocks; returns caches and padded block tables."""
    kvh, d = ks[0].shape[1:]
    key_cache = torch.zeros(num_blocks, BLOCK, kvh, d)
    value_cache = torch.zeros_like(key_cache)
    free = (torch.randperm(num_blocks - 1, generator=rng) + 1).tolist()  # block 0 stays the null block
    max_blocks = max(-(-k.shape[0] // BLOCK) for k in ks)
    tables = torch.zeros(len(ks), max_blocks, dtype=torch.int32)
    for i, (k, v) in enumerate(zip(ks, vs, strict=True)):
        n = -(-k.shape[0] // BLOCK)
        blocks = [free.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        pos = torch.arange(k.shape[0])
        slots = torch.tensor(blocks)[pos // BLOCK] * BLOCK + pos % BLOCK
        backend.reshape_and_cache(k, v, key_cache, value_cache, slots.to(torch.int64))
    return key_cache, value_cache, tables


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize(("window", "soft_cap"), [(-1, 0.0), (5, 0.0), (-1, 20.0)])
def test_mixed_batch_matches_dense(heads, kv_heads, window, soft_cap):
    rng = torch.Generator().manual_seed(0)
    backend = get_backend("reference")
    d = 8
    # (seq_len, q_len): a whole prefill, a prefill chunk after cached context (prefix-cache resume), decodes
    shapes = [(7, 7), (13, 5), (9, 1), (4, 1), (1, 1)]
    ks = [torch.randn(s, kv_heads, d, generator=rng) for s, _ in shapes]
    vs = [torch.randn(s, kv_heads, d, generator=rng) for s, _ in shapes]
    qs = [torch.randn(q, heads, d, generator=rng) for _, q in shapes]
    key_cache, value_cache, tables = scatter_to_cache(backend, ks, vs, 32, rng)
    query = torch.cat(qs)
    qsl = torch.tensor([0, *torch.cumsum(torch.tensor([q for _, q in shapes]), 0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor([s for s, _ in shapes], dtype=torch.int32)
    out = torch.empty_like(query)
    backend.paged_attention(out, query, key_cache, value_cache, tables, qsl, seq_lens, 0.3, window, soft_cap)
    expected = torch.cat([dense_attention(q, k, v, 0.3, window, soft_cap) for q, k, v in zip(qs, ks, vs, strict=True)])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_reshape_and_cache_skips_negative_slots():
    backend = get_backend("reference")
    key_cache = torch.zeros(3, BLOCK, 1, 2)
    value_cache = torch.zeros_like(key_cache)
    key = torch.ones(3, 1, 2)
    backend.reshape_and_cache(key, 2 * key, key_cache, value_cache, torch.tensor([5, -1, 8]))
    assert key_cache.view(-1, 1, 2)[[5, 8]].eq(1).all() and value_cache.view(-1, 1, 2)[[5, 8]].eq(2).all()
    assert key_cache.sum() == 4  # nothing else written


def test_copy_blocks_copies_every_cache():
    backend = get_backend("reference")
    caches = [torch.arange(4 * BLOCK * 2, dtype=torch.float32).view(4, BLOCK, 1, 2) + 100 * i for i in range(4)]
    before = [c.clone() for c in caches]
    backend.copy_blocks(caches[:2], caches[2:], torch.tensor([[1, 3], [2, 0]]))
    for cache, old in zip(caches, before, strict=True):
        assert torch.equal(cache[3], old[1]) and torch.equal(cache[0], old[2]) and torch.equal(cache[1], old[1])


def test_unknown_backend_lists_available():
    assert "reference" in available_backends()
    with pytest.raises(ValueError, match=r"unknown attention backend 'nope'; available: .*reference"):
        get_backend("nope")
