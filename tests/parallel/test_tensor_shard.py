"""How tensor parallelism cuts a model: every head, intermediate row and vocabulary row on exactly one rank, and a
rank's KV heads the ones its query heads read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_engine.parallel.layout import PipelineStage, ShardingError, TensorShard


@st.composite
def cuttable(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    size = draw(st.sampled_from([1, 2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8, 16) if k % size == 0 or size % k == 0]))
    heads = kv * draw(st.integers(1, 4)) * max(1, size // kv)
    intermediate = size * draw(st.integers(1, 64))
    vocab = draw(st.integers(size, 5000))
    return size, heads, kv, intermediate, vocab


@given(cuttable())
def test_every_index_on_one_rank_and_kv_heads_follow_the_queries(sizes):
    size, heads, kv, intermediate, vocab = sizes
    shards = [TensorShard(rank, size, heads, kv, intermediate, vocab) for rank in range(size)]
    assert [h for s in shards for h in s.heads] == list(range(heads))
    assert [i for s in shards for i in s.intermediate] == list(range(intermediate))
    assert [v for s in shards for v in s.vocab] == list(range(vocab))
    assert all(len(s.vocab) <= s.vocab_per_rank for s in shards)
    group = heads // kv  # query heads per KV head
    for s in shards:
        assert {h // group for h in s.heads} == set(s.kv_heads)
    # with fewer KV heads than ranks each is replicated, never split
    assert sorted({h for s in shards for h in s.kv_heads}) == list(range(kv))


def test_gemma_270m_single_kv_head_is_replicated():
    shards = [TensorShard(rank, 2, 4, 1, 2048, 262144) for rank in range(2)]
    assert [s.kv_heads for s in shards] == [range(0, 1), range(0, 1)]
    assert [s.heads for s in shards] == [range(0, 2), range(2, 4)]


def test_odd_vocabulary_pads_the_last_rank():
    last = TensorShard(1, 2, 4, 2, 96, 131)
    assert last.vocab_per_rank == 66 and last.vocab == range(66, 131)


@pytest.mark.parametrize(
    ("sizes", "named"),
    [((3, 4, 2, 96, 128), "4 attention heads"), ((4, 8, 6, 96, 128), "6 KV heads"), ((2, 4, 2, 95, 128), "95")],
)
def test_uncuttable_models_are_refused_naming_the_size(sizes, named):
    size, heads, kv, intermediate, vocab = sizes
    with pytest.raises(ShardingError, match=named):
        TensorShard(0, size, heads, kv, intermediate, vocab)


@given(st.integers(1, 80), st.integers(1, 8))
def test_pipeline_stages_hold_every_layer_once_in_order(num_layers, size):
    if size > num_layers:
        with pytest.raises(ShardingError, match=f"more than the model's {num_layers} layers"):
            PipelineStage(0, size, num_layers)
        return
    stages = [PipelineStage(rank, size, num_layers) for rank in range(size)]
    assert [layer for s in stages for layer in s.layers] == list(range(num_layers))
    sizes = [len(s.layers) for s in stages]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
