"""Random paged batches for the kernel tests: K/V scattered over shuffled physical blocks, with poisoned memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import torch


@dataclass
class PagedBatch:
    query: torch.Tensor  # [T, heads, d]
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_tables: torch.Tensor  # [S, max_blocks] int32
    query_start_loc: torch.Tensor  # [S + 1] int32
    seq_lens: torch.Tensor  # [S] int32
    scale: float
    sliding_window: int = -1
    logits_soft_cap: float = 0.0

    def args(self) -> tuple:
        return (
            self.query,
            self.key_cache,
            self.value_cache,
            self.block_tables,
            self.query_start_loc,
            self.seq_lens,
            self.scale,
            self.sliding_window,
            self.logits_soft_cap,
        )


def make_batch(
    seqs: Sequence[tuple[int, int]],
    *,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 64,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    sliding_window: int = -1,
    logits_soft_cap: float = 0.0,
    padding_tokens: int = 0,
    seed: int = 0,
) -> PagedBatch:
    """A batch of sequences given as ``(seq_len, q_len)``, their K/V scattered over shuffled physical blocks.

    Memory the kernel must never read is poisoned with NaN: block 0 (the null block, which stands in for table
    entries wholly outside the window), the slots past each sequence's end, and unused table columns.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(seq_len / block_size) for seq_len, _ in seqs]
    num_blocks = 1 + sum(blocks_per_seq) + 2
    physical = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, float("nan"))
    value_cache = torch.full(shape, float("nan"))
    max_blocks = max(blocks_per_seq, default=0) + 1
    block_tables = torch.zeros(len(seqs), max_blocks, dtype=torch.int32)
    for i, (seq_len, q_len) in enumerate(seqs):
        assert 0 <= q_len <= seq_len
        first_visible = max(0, seq_len - q_len - sliding_window + 1) if sliding_window > 0 else 0
        for b in range(blocks_per_seq[i]):
            if (b + 1) * block_size <= first_visible:
                continue  # wholly outside every query's window: left as the null block
            block = physical.pop()
            block_tables[i, b] = block
            n = min(block_size, seq_len - b * block_size)
            key_cache[block, :n] = torch.randn(n, num_kv_heads, head_dim, generator=gen)
            value_cache[block, :n] = torch.randn(n, num_kv_heads, head_dim, generator=gen)
    q_lens = [q for _, q in seqs]
    query_start_loc = torch.tensor([0, *accumulate(q_lens)], dtype=torch.int32)
    query = torch.randn(sum(q_lens) + padding_tokens, num_heads, head_dim, generator=gen)
    return PagedBatch(
        query=query.to(dtype),
        key_cache=key_cache.to(dtype),
        value_cache=value_cache.to(dtype),
        block_tables=block_tables,
        query_start_loc=query_start_loc,
        seq_lens=torch.tensor([s for s, _ in seqs], dtype=torch.int32),
        scale=head_dim**-0.5,
        sliding_window=sliding_window,
        logits_soft_cap=logits_soft_cap,
    )
