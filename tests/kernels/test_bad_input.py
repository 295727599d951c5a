"""Wrong dtype, device, shape or value reaching an op raises an error naming the argument, never a crash."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops

from .batches import make_batch

pytestmark = pytest.mark.usefixtures("kernels")


def attention_args(**overrides):
    batch = make_batch([(20, 3), (9, 1)], num_heads=4, num_kv_heads=2, head_dim=64)
    args = {
        "out": torch.zeros_like(batch.query),
        "query": batch.query,
        "key_cache": batch.key_cache,
        "value_cache": batch.value_cache,
        "block_tables": batch.block_tables,
        "query_start_loc": batch.query_start_loc,
        "seq_lens": batch.seq_lens,
        "scale": batch.scale,
        "sliding_window": -1,
        "logits_soft_cap": 0.0,
    }
    args.update({k: (v(args) if callable(v) else v) for k, v in overrides.items()})
    return args


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"query": lambda a: a["query"].double()}, r"query must be float32 or bfloat16, got Double"),
        ({"out": lambda a: a["out"].bfloat16()}, r"out must be Float, got BFloat16"),
        ({"out": lambda a: a["out"][:, :2]}, r"out must have shape \[num_tokens, num_heads, head_dim\]"),
        (
            {"query": lambda a: a["query"][..., :32], "out": lambda a: a["out"][..., :32]},
            r"key_cache must have shape .* query's head_dim",
        ),
        ({"query": lambda a: a["query"][:, :, None]}, r"query must be \[num_tokens, num_heads, head_dim\]"),
        (
            {"query": lambda a: a["query"][:, :3], "out": lambda a: a["out"][:, :3]},
            r"num_heads \(3\) must be a multiple of num_kv_heads \(2\)",
        ),
        ({"value_cache": lambda a: a["value_cache"][:, :8]}, r"value_cache must have shape"),
        ({"key_cache": lambda a: a["key_cache"].transpose(1, 2).contiguous().transpose(1, 2)}, "contiguous"),
        ({"query": lambda a: a["query"].transpose(1, 2).contiguous().transpose(1, 2)}, "last dimension"),
        ({"block_tables": lambda a: a["block_tables"].long()}, r"block_tables must be Int, got Long"),
        ({"block_tables": lambda a: a["block_tables"][0]}, r"block_tables must be \[num_seqs, max_blocks_per_seq\]"),
        ({"seq_lens": lambda a: a["seq_lens"][:1]}, r"seq_lens must have shape \[num_seqs\] = \[2\], got \[1\]"),
        ({"query_start_loc": lambda a: a["query_start_loc"][:2]}, r"query_start_loc must have shape \[num_seqs \+ 1\]"),
        ({"query_start_loc": torch.tensor([1, 3, 4], dtype=torch.int32)}, r"query_start_loc\[0\] must be 0, got 1"),
        ({"query_start_loc": torch.tensor([0, 3, 9], dtype=torch.int32)}, r"query_start_loc\[-1\] = 9 exceeds"),
        ({"query_start_loc": torch.tensor([0, 3, 2], dtype=torch.int32)}, r"must be non-decreasing"),
        ({"seq_lens": torch.tensor([2, 9], dtype=torch.int32)}, r"sequence 0 has 3 queries but seq_lens\[0\] = 2"),
        ({"seq_lens": torch.tensor([20, 90], dtype=torch.int32)}, r"seq_lens\[1\] = 90 exceeds the block table"),
        ({"block_tables": lambda a: a["block_tables"] + 50}, r"block_tables\[0, 0\] = \d+ is outside the cache"),
        ({"sliding_window": 0}, r"sliding_window must be -1 \(none\) or a positive number of tokens, got 0"),
        ({"logits_soft_cap": -1.0}, r"logits_soft_cap must be 0 \(none\) or positive"),
    ],
)
def test_paged_attention_rejects(overrides, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        ops.paged_attention(**attention_args(**overrides))


def test_paged_attention_rejects_unsupported_head_dim() -> None:
    batch = make_batch([(5, 1)], head_dim=48)
    with pytest.raises(RuntimeError, match=r"head_dim must be one of 16, 32, 64, 80, 96, 128, 256 on the CPU, got 48"):
        ops.paged_attention(torch.zeros_like(batch.query), *batch.args())


def test_paged_attention_rejects_metadata_on_another_device() -> None:
    args = attention_args(seq_lens=lambda a: a["seq_lens"].to("meta"))
    with pytest.raises(RuntimeError, match=r"paged::paged_attention: seq_lens is on meta but query is on cpu"):
        ops.paged_attention(**args)


def cache_args(**overrides):
    args = {
        "key": torch.randn(3, 2, 8),
        "value": torch.randn(3, 2, 8),
        "key_cache": torch.zeros(4, 4, 2, 8),
        "value_cache": torch.zeros(4, 4, 2, 8),
        "slot_mapping": torch.tensor([0, 5, -1]),
    }
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"slot_mapping": torch.tensor([0, 16, 1])}, r"slot_mapping\[1\] = 16 is outside \[-1, 16\)"),
        ({"slot_mapping": torch.tensor([0, -2, 1])}, r"slot_mapping\[1\] = -2 is outside"),
        ({"slot_mapping": torch.tensor([0, 1, 2], dtype=torch.int32)}, r"slot_mapping must be Long, got Int"),
        ({"slot_mapping": torch.tensor([0, 1])}, r"slot_mapping must have shape \[num_tokens\] = \[3\], got \[2\]"),
        ({"key": torch.randn(3, 2, 4)}, r"key must have shape \[num_tokens, num_kv_heads, head_dim\]"),
        ({"value": torch.randn(3, 8)}, r"value must have shape"),
        ({"key": torch.randn(3, 2, 8).bfloat16()}, r"key must be Float, got BFloat16"),
        ({"value_cache": torch.zeros(4, 4, 2, 8, dtype=torch.float16)}, r"value_cache must be Float, got Half"),
        ({"value_cache": torch.zeros(3, 4, 2, 8)}, r"value_cache must have shape key_cache's shape"),
        ({"key_cache": torch.zeros(4, 4, 16)}, r"key_cache must be \[num_blocks, block_size, num_kv_heads, head_dim\]"),
    ],
)
def test_reshape_and_cache_rejects(overrides, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        ops.reshape_and_cache(**cache_args(**overrides))


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (torch.tensor([[0, 9]]), r"block_mapping\[0, 1\] = 9 is outside key_caches\[0\]'s 4 blocks"),
        (torch.tensor([[-1, 2]]), r"block_mapping\[0, 0\] = -1 is outside"),
        (torch.tensor([[0, 2], [1, 2]]), r"destination 2 is written twice or is also a source"),
        (torch.tensor([[0, 2], [2, 3]]), r"destination 2 is written twice or is also a source"),
        (torch.tensor([[0, 2]], dtype=torch.int32), r"block_mapping must be Long, got Int"),
        (torch.tensor([0, 2]), r"block_mapping must be \[num_pairs, 2\]"),
    ],
)
def test_copy_blocks_rejects(mapping: torch.Tensor, message: str) -> None:
    caches = [torch.zeros(4, 4, 2, 8)]
    with pytest.raises(RuntimeError, match=message):
        ops.copy_blocks(caches, [torch.zeros(4, 4, 2, 8)], mapping)


def test_copy_blocks_rejects_mismatched_layers() -> None:
    with pytest.raises(RuntimeError, match=r"key_caches has 2 tensors but value_caches has 1"):
        ops.copy_blocks([torch.zeros(4, 2), torch.zeros(4, 2)], [torch.zeros(4, 2)], torch.tensor([[0, 1]]))
    with pytest.raises(RuntimeError, match=r"value_caches\[0\] must match key_caches\[0\]"):
        ops.copy_blocks([torch.zeros(4, 2)], [torch.zeros(4, 3)], torch.tensor([[0, 1]]))
