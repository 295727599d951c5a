"""Pure-torch statement of the ``paged`` op semantics, written for obviousness rather than speed: a loop over
sequences, a gather of each sequence's keys through its block table, and a masked softmax in fp32."""

from __future__ import annotations

import torch


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None:
    block_size = key_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[t]
        value_cache[slot // block_size, slot % block_size] = value[t]


def copy_blocks(key_caches, value_caches, block_mapping) -> None:
    for src, dst in block_mapping.tolist():
        for cache in (*key_caches, *value_caches):
            cache[dst] = cache[src]


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int = -1,
    logits_soft_cap: float = 0.0,
) -> torch.Tensor:
    """Returns the attention output ``[T, heads, d]`` in ``query``'s dtype; rows of no sequence stay zero."""
    out = torch.zeros_like(query)
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = query.shape[1] // num_kv_heads
    qsl = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q_len = qsl[i + 1] - qsl[i]
        if q_len == 0:
            continue
        key_pos = torch.arange(seq_len)
        query_pos = torch.arange(seq_len - q_len, seq_len)
        visible = key_pos[None, :] <= query_pos[:, None]
        if sliding_window > 0:
            visible &= key_pos[None, :] > query_pos[:, None] - sliding_window
        # Gather only keys some query can see: table entries outside the window may be the null block.
        needed = visible.any(dim=0)
        blocks = block_tables[i, key_pos // block_size].long()
        keys = torch.zeros(seq_len, num_kv_heads, key_cache.shape[3])
        values = torch.zeros_like(keys)
        keys[needed] = key_cache[blocks[needed], key_pos[needed] % block_size].float()
        values[needed] = value_cache[blocks[needed], key_pos[needed] % block_size].float()
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        q = query[qsl[i] : qsl[i + 1]].float()
        scores = torch.einsum("qhd,khd->hqk", q, keys) * scale
        if logits_soft_cap > 0:
            scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
        scores = scores.masked_fill(~visible[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[qsl[i] : qsl[i + 1]] = torch.einsum("hqk,khd->qhd", probs, values).to(query.dtype)
    return out
