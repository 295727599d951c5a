"""Portable torch implementation of the attention kernels; the correctness yardstick for the others.

``paged_attention`` pads the batch to ``[num_seqs, max_query_len]`` queries, gathers each sequence's keys and
values through its block table, and runs one masked ``scaled_dot_product_attention`` for the whole mixed batch
(prefill chunks and decode tokens together). The padding indices and masks depend only on the step's
``query_start_loc``/``seq_lens`` (and the window), which every layer of a step shares, so they are built once per
step and reused by identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from paged_engine.attention.backend import AttentionBackend


@dataclass
class _StepLayout:
    """Padding indices shared by every layer of one step (same ``query_start_loc`` and ``seq_lens`` objects)."""

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    seq_index: torch.Tensor  # [T] which sequence each flat query row belongs to
    row_index: torch.Tensor  # [T] its row within that sequence's padded queries
    query_pos: torch.Tensor  # [S, Qmax] absolute position of each padded query row
    max_query_len: int
    max_seq_len: int
    masks: dict[int, torch.Tensor]  # sliding window (-1 none) -> [S, 1, Qmax, L] bool, True = attend


class TorchReferenceBackend(AttentionBackend):
    name = "reference"

    def __init__(self) -> None:
        self._layout: _StepLayout | None = None

    def reshape_and_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        valid = slot_mapping >= 0
        if not bool(valid.all()):
            key, value, slot_mapping = key[valid], value[valid], slot_mapping[valid]
        num_slots = key_cache.shape[0] * key_cache.shape[1]
        key_cache.view(num_slots, *key_cache.shape[2:]).index_copy_(0, slot_mapping, key.to(key_cache.dtype))
        value_cache.view(num_slots, *value_cache.shape[2:]).index_copy_(0, slot_mapping, value.to(value_cache.dtype))

    def copy_blocks(
        self, key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping: torch.Tensor
    ) -> None:
        if block_mapping.numel() == 0:
            return
        src, dst = block_mapping[:, 0], block_mapping[:, 1]
        for cache in (*key_caches, *value_caches):
            cache[dst] = cache[src]

    def _step_layout(self, query_start_loc: torch.Tensor, seq_lens: torch.Tensor) -> _StepLayout:
        cached = self._layout
        if cached is not None and cached.query_start_loc is query_start_loc and cached.seq_lens is seq_lens:
            return cached
        qsl = query_start_loc.to(torch.int64)
        lens = seq_lens.to(torch.int64)
        q_lens = qsl[1:] - qsl[:-1]
        num_seqs = lens.numel()
        max_query_len = int(q_lens.max())
        seq_index = torch.repeat_interleave(torch.arange(num_seqs, device=qsl.device), q_lens)
        row_index = torch.arange(int(qsl[-1]), device=qsl.device) - qsl[seq_index]
        query_pos = (lens - q_lens)[:, None] + torch.arange(max_query_len, device=qsl.device)[None, :]
        self._layout = _StepLayout(
            query_start_loc, seq_lens, seq_index, row_index, query_pos, max_query_len, int(lens.max()), {}
        )
        return self._layout

    @staticmethod
    def _mask(layout: _StepLayout, num_keys: int, sliding_window: int) -> torch.Tensor:
        mask = layout.masks.get(sliding_window)
        if mask is None or mask.shape[-1] != num_keys:
            key_pos = torch.arange(num_keys, device=layout.query_pos.device)
            qpos = layout.query_pos[:, :, None]
            mask = key_pos[None, None, :] <= qpos
            if sliding_window > 0:
                mask &= key_pos[None, None, :] > qpos - sliding_window
            mask = mask[:, None]
            layout.masks[sliding_window] = mask
        return mask

    def paged_attention(
        self,
        out: torch.Tensor,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_tables: torch.Tensor,
        query_start_loc: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
        sliding_window: int = -1,
        logits_soft_cap: float = 0.0,
    ) -> None:
        layout = self._step_layout(query_start_loc, seq_lens)
        num_seqs = seq_lens.numel()
        _, block_size, num_kv_heads, head_dim = key_cache.shape
        num_heads = query.shape[1]
        num_blocks = -(-layout.max_seq_len // block_size)
        table = block_tables[:, :num_blocks].to(torch.int64)
        num_keys = num_blocks * block_size
        # [S, kv_heads, L, d]
        keys = key_cache[table].view(num_seqs, num_keys, num_kv_heads, head_dim).transpose(1, 2)
        values = value_cache[table].view(num_seqs, num_keys, num_kv_heads, head_dim).transpose(1, 2)
        decode_only = layout.max_query_len == 1  # one query per sequence: no padding needed
        if decode_only:
            queries = query.view(num_seqs, 1, num_heads, head_dim).transpose(1, 2)
        else:
            padded = query.new_zeros(num_seqs, layout.max_query_len, num_heads, head_dim)
            padded[layout.seq_index, layout.row_index] = query
            queries = padded.transpose(1, 2)  # [S, heads, Qmax, d]
        mask = self._mask(layout, num_keys, sliding_window)
        if logits_soft_cap > 0.0:
            result = _soft_capped_attention(queries, keys, values, mask, scale, logits_soft_cap)
        else:
            result = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=mask, scale=scale, enable_gqa=num_heads != num_kv_heads
            )
        if decode_only:
            out.copy_(result.transpose(1, 2).reshape(num_seqs, num_heads, head_dim))
        else:
            out.copy_(result.transpose(1, 2)[layout.seq_index, layout.row_index])


def _soft_capped_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float, cap: float
) -> torch.Tensor:
    """Explicit attention with tanh soft-capping of the scores (SDPA has no soft-cap)."""
    group = queries.shape[1] // keys.shape[1]
    if group > 1:
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
    scores = torch.matmul(queries, keys.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / cap) * cap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(queries.dtype), values)
