"""Our FlashAttention 4 adapter against the torch reference, on the CPU: FlashAttention's paged varlen contract
(keys through ``page_table``, lengths in ``seqused_k``, a causal mask aligned to the end of the keys, a
``(left, right)`` window) is written out in torch below, so the mapping of our conventions onto it (window,
causality, bounds, dtypes) is checked here; the real kernel is compared with the reference on a GPU
(test_cuda_ops.py) by scripts/gpu_check.sh."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from paged_engine.attention.flash import flash_prefill
from paged_engine.attention.selection import flash_gap

from . import reference
from .batches import make_batch


def flash_contract(
    q, k_cache, v_cache, *, cu_seqlens_q, seqused_k, max_seqlen_q, max_seqlen_k, page_table, softmax_scale,
    causal, window_size, softcap,
):  # fmt: skip
    """FlashAttention's ``flash_attn_varlen_func`` with ``page_table``, as its documentation states it."""
    assert causal and page_table.dtype == torch.int32 and page_table.stride(-1) == 1
    assert cu_seqlens_q.dtype == torch.int32 and seqused_k.dtype == torch.int32
    cu, lens = cu_seqlens_q.tolist(), seqused_k.tolist()
    assert max_seqlen_q >= max(b - a for a, b in itertools.pairwise(cu))
    assert max_seqlen_k >= max(lens) and max_seqlen_k <= page_table.shape[1] * k_cache.shape[1]
    page_size, group = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
    left, right = window_size
    out = torch.empty_like(q)
    for s, seq_len in enumerate(lens):
        rows = q[cu[s] : cu[s + 1]]
        pages = page_table[s, : math.ceil(seq_len / page_size)].long()
        keys = k_cache[pages].flatten(0, 1)[:seq_len].repeat_interleave(group, 1)
        values = v_cache[pages].flatten(0, 1)[:seq_len].repeat_interleave(group, 1)
        query_pos = torch.arange(len(rows))[:, None] + (seq_len - len(rows))
        key_pos = torch.arange(seq_len)[None, :]
        visible = key_pos <= query_pos
        if left is not None:
            visible &= key_pos >= query_pos - left
        assert right in (None, 0)
        seen = visible.any(0)  # keys no query sees are never read (they may be poisoned)
        keys, values = torch.where(seen[:, None, None], keys, 0.0), torch.where(seen[:, None, None], values, 0.0)
        scores = torch.einsum("qhd,khd->hqk", rows.float(), keys.float()) * softmax_scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        out[cu[s] : cu[s + 1]] = torch.einsum("hqk,khd->qhd", probs, values.float()).to(q.dtype)
    return out, None


@pytest.mark.parametrize(
    "seqs, window, cap",
    [
        ([(40, 40), (70, 13), (9, 1)], -1, 0.0),
        ([(100, 30), (33, 33)], 24, 0.0),
        ([(64, 64), (130, 7)], -1, 30.0),
    ],
)
def test_flash_prefill_adapter_matches_reference(seqs, window, cap) -> None:
    batch = make_batch(seqs, num_heads=8, num_kv_heads=2, head_dim=64, sliding_window=window, logits_soft_cap=cap)
    expected = reference.paged_attention(*batch.args())
    out = torch.full_like(batch.query, float("nan"))
    flash_prefill(flash_contract, out, *batch.args())
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)


def test_flash_gap_names_what_flashattention_4_lacks() -> None:
    assert flash_gap((9, 0), "bfloat16", 256) is None
    assert flash_gap((10, 0), "bfloat16", 128) is None
    assert "SM 8.0" in flash_gap((8, 0), "bfloat16", 128)
    assert "float32" in flash_gap((9, 0), "float32", 128)
    assert "8..256" in flash_gap((9, 0), "bfloat16", 512)
    assert "multiple of 8" in flash_gap((9, 0), "float16", 60)
    assert "SM 10.x" in flash_gap((10, 0), "bfloat16", 192)
