"""The attention backend interface: the three kernels every backend provides, plus per-step metadata.

The layout is fixed so that kernels written in C++ or CUDA drop in without touching the model code:

- KV cache per layer: ``key_cache`` and ``value_cache`` of shape ``[num_blocks, block_size, num_kv_heads, head_dim]``.
- A *slot* is ``block_id * block_size + offset``; slot ``-1`` means "do not write".
- Sequence ``i`` owns the flat query rows ``query_start_loc[i]:query_start_loc[i + 1]``; they are the LAST
  ``q_len`` positions of its ``seq_lens[i]`` tokens (causal), whose keys and values are all in the cache by the
  time ``paged_attention`` runs (``reshape_and_cache`` is called first).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """What every attention layer needs for one model step; built once per step by the model runner.

    ``block_tables`` and ``slot_mappings`` hold one entry per KV-cache group, because sliding-window groups and
    full-attention groups own different physical blocks for the same request.
    """

    num_tokens: int
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    max_query_len: int
    max_seq_len: int
    block_tables: list[torch.Tensor]  # per group: [num_seqs, max_blocks] int32
    slot_mappings: list[torch.Tensor]  # per group: [num_tokens] int64


class AttentionBackend(ABC):
    """Kernels over the paged KV cache. Implementations must be stateless with respect to requests."""

    name: str = "abstract"

    @abstractmethod
    def reshape_and_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write ``key``/``value`` ``[T, kv_heads, d]`` into the caches at ``slot_mapping`` ``[T]`` (−1 skips)."""

    @abstractmethod
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
        """Causal attention of ``query`` ``[T, heads, d]`` over the paged cache, written into ``out``.

        ``sliding_window`` −1 means none; otherwise a query at position p sees keys at positions
        ``p - sliding_window + 1 .. p``. ``logits_soft_cap`` 0 means none; otherwise scores become
        ``cap * tanh(scores / cap)``. Query heads map to KV heads by grouping (GQA/MQA).
        """

    @abstractmethod
    def copy_blocks(
        self, key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping: torch.Tensor
    ) -> None:
        """For each row ``(src, dst)`` of ``block_mapping`` ``[n, 2]`` int64, copy block src to dst in every cache."""
