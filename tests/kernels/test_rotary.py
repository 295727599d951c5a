"""``paged::rotary_embedding``: bit-equal to ``layers.apply_rope`` (transformers' ``rotate_half`` RoPE) in fp32
and bf16, in place on per-head views of a fused QKV output, vector tails included; torch.library checks; errors."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops
from paged_engine.models.layers import apply_rope, rope_cos_sin, rope_inv_freq

pytestmark = pytest.mark.usefixtures("kernels")


def cos_sin(tokens: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    positions = torch.arange(tokens) * 37 + 5  # spread out, so the angles are not all small
    return rope_cos_sin(positions, rope_inv_freq(head_dim, {"rope_theta": 10_000.0}), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "head_dim"), [(1, 1, 1, 2), (5, 4, 1, 26), (33, 8, 2, 64),
                                                                     (7, 4, 1, 256)])  # fmt: skip
def test_bit_equal_to_torch_on_fused_qkv_views(dtype, tokens, heads, kv_heads, head_dim):
    generator = torch.Generator().manual_seed(tokens * head_dim)
    qkv = (torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=generator) * 3).to(dtype)
    q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)
    k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    v_before = qkv[:, (heads + kv_heads) * head_dim :].clone()
    cos, sin = cos_sin(tokens, head_dim, dtype)
    expected_q, expected_k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    ops.rotary_embedding_(q, k, cos, sin)
    assert torch.equal(q, expected_q)
    assert torch.equal(k, expected_k)
    assert torch.equal(qkv[:, (heads + kv_heads) * head_dim :], v_before)  # the value columns are untouched


def test_opcheck():
    cos, sin = cos_sin(3, 8, torch.float32)
    args = (torch.randn(3, 2, 8), torch.randn(3, 1, 8), cos, sin)
    torch.library.opcheck(torch.ops.paged.rotary_embedding.default, args)


@pytest.mark.parametrize(
    ("query", "key", "cos", "message"),
    [
        (torch.randn(3, 2, 8).double(), torch.randn(3, 1, 8), torch.randn(3, 8), "input must be float32 or bfloat16"),
        (torch.randn(3, 2, 8), torch.randn(3, 1, 8).bfloat16(), torch.randn(3, 8), "key must be Float"),
        (torch.randn(3, 16), torch.randn(3, 1, 8), torch.randn(3, 8), r"query must be \[tokens, heads, head_dim\]"),
        (torch.randn(3, 2, 7), torch.randn(3, 1, 7), torch.randn(3, 7), "head_dim must be even"),
        (torch.randn(3, 2, 8), torch.randn(4, 1, 8), torch.randn(3, 8), "key must have query's tokens and head_dim"),
        (torch.randn(3, 2, 8), torch.randn(3, 1, 8), torch.randn(3, 4), r"cos must have shape \[tokens, head_dim\]"),
        (torch.randn(3, 8, 2).transpose(1, 2), torch.randn(3, 1, 8), torch.randn(3, 8),
         "query must be contiguous in its last dimension"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(query, key, cos, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.paged.rotary_embedding(query, key, cos, cos.clone())
