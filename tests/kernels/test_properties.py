"""Property-based checks (hypothesis) of the CPU ops against the reference over arbitrary small batches:
any block size, any mix of empty, decode and prefill rows, any window, GQA groups of any size."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paged_engine.kernels import ops

from . import reference
from .batches import make_batch

pytestmark = pytest.mark.usefixtures("kernels")

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def sequences(draw) -> list[tuple[int, int]]:
    seqs = []
    for _ in range(draw(st.integers(1, 4))):
        seq_len = draw(st.integers(1, 120))
        seqs.append((seq_len, draw(st.integers(0, seq_len))))
    return seqs


@SETTINGS
@given(
    seqs=sequences(),
    kv_heads=st.integers(1, 3),
    group=st.integers(1, 5),
    head_dim=st.sampled_from([16, 32, 64, 80, 96, 128, 256]),
    block_size=st.integers(1, 40),
    window=st.one_of(st.just(-1), st.integers(1, 130)),
    soft_cap=st.sampled_from([0.0, 20.0]),
    seed=st.integers(0, 2**16),
)
def test_paged_attention_matches_reference(seqs, kv_heads, group, head_dim, block_size, window, soft_cap, seed):
    batch = make_batch(
        seqs,
        num_heads=kv_heads * group,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        sliding_window=window,
        logits_soft_cap=soft_cap,
        seed=seed,
    )
    out = torch.zeros_like(batch.query)
    ops.paged_attention(out, *batch.args())
    torch.testing.assert_close(out, reference.paged_attention(*batch.args()), atol=3e-5, rtol=3e-5)


@SETTINGS
@given(
    num_blocks=st.integers(1, 8),
    block_size=st.integers(1, 9),
    data=st.data(),
)
def test_reshape_and_cache_matches_reference(num_blocks, block_size, data):
    num_slots = num_blocks * block_size
    tokens = data.draw(st.integers(0, num_slots))
    slots = data.draw(st.permutations(range(num_slots)))[:tokens]
    slots = [s if data.draw(st.booleans()) else -1 for s in slots]
    key, value = torch.randn(tokens, 2, 16), torch.randn(tokens, 2, 16)
    key_cache, value_cache = torch.randn(num_blocks, block_size, 2, 16), torch.randn(num_blocks, block_size, 2, 16)
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    mapping = torch.tensor(slots, dtype=torch.int64)
    reference.reshape_and_cache(key, value, expected_k, expected_v, mapping)
    ops.reshape_and_cache(key, value, key_cache, value_cache, mapping)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)
