"""paged::paged_attention (CPU) against the pure-torch reference on edge cases and randomised batches, in every
instruction-set variant of the kernels the machine supports, with fp32 and bf16 caches (the AMX variant serves
bf16 caches only, so every shape is checked in bf16 too)."""

from __future__ import annotations

import random

import pytest
import torch
from paged_engine.kernels import ops

from . import reference
from .batches import PagedBatch, make_batch

pytestmark = pytest.mark.usefixtures("cpu_isa")

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def run_op(batch: PagedBatch, out: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.zeros_like(batch.query) if out is None else out
    ops.paged_attention(out, *batch.args())
    return out


def assert_matches_reference(batch: PagedBatch) -> None:
    expected = reference.paged_attention(*batch.args())
    actual = run_op(batch)
    tol = TOLERANCE[batch.query.dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize(
    ("name", "seqs", "window"),
    [
        ("single token", [(1, 1)], -1),
        ("exactly one block", [(16, 16)], -1),
        ("decode at a block's last slot", [(16, 1)], -1),
        ("crossing a block boundary", [(17, 2)], -1),
        ("many blocks, chunked prefill", [(75, 30)], -1),
        ("window longer than the sequence", [(20, 5), (3, 1)], 1000),
        ("window with null blocks before it", [(70, 3), (90, 1)], 20),
        ("window of one token", [(33, 4)], 1),
        ("empty rows between sequences", [(9, 0), (40, 1), (5, 0), (18, 18), (30, 0)], -1),
        ("mixed prefill and decode", [(50, 50), (81, 1), (200, 1), (64, 7)], -1),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_edge_cases(name: str, seqs: list[tuple[int, int]], window: int, dtype: torch.dtype) -> None:
    assert_matches_reference(make_batch(seqs, sliding_window=window, dtype=dtype))


@pytest.mark.parametrize("head_dim", [16, 32, 64, 80, 96, 128, 256])
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (8, 2), (6, 1), (3, 1), (32, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_layouts(head_dim: int, num_heads: int, num_kv_heads: int, dtype: torch.dtype) -> None:
    """Up to 32 query heads per KV head: more rows than one AMX tile holds, which runs the AVX-512 variant."""
    batch = make_batch(
        [(37, 37), (60, 1), (21, 5)],
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        seed=head_dim + num_heads,
    )
    assert_matches_reference(batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_soft_cap_and_dtypes(dtype: torch.dtype) -> None:
    batch = make_batch([(45, 12), (30, 1)], dtype=dtype, logits_soft_cap=5.0, sliding_window=25, seed=3)
    batch.scale = 1.0  # large logits so the cap actually bends them
    assert_matches_reference(batch)


def test_bf16_mixed_batch() -> None:
    assert_matches_reference(make_batch([(100, 100), (300, 1), (17, 3)], dtype=torch.bfloat16, head_dim=128))


@pytest.fixture
def two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("window", [-1, 300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_context_split_over_keys(window: int, dtype: torch.dtype) -> None:
    """Few long sequences leave threads idle, so the kernel splits keys into partitions and merges them."""
    batch = make_batch(
        [(1500, 1), (1100, 9)], num_heads=8, num_kv_heads=1, head_dim=128, sliding_window=window, dtype=dtype
    )
    assert_matches_reference(batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_size_not_a_power_of_two(dtype: torch.dtype) -> None:
    assert_matches_reference(make_batch([(40, 6), (7, 7)], block_size=5, seed=4, dtype=dtype))


def test_padding_rows_and_strided_query_are_respected() -> None:
    """Rows past query_start_loc[-1] (CUDA-graph padding) stay untouched; query/out may be strided views."""
    batch = make_batch([(30, 4), (12, 2)], num_heads=4, num_kv_heads=2, padding_tokens=3)
    qkv = torch.randn(batch.query.shape[0], 8, 64)
    qkv[:, ::2] = batch.query
    batch.query = qkv[:, ::2]
    out_storage = torch.full((batch.query.shape[0], 4, 2, 64), 7.0)
    out = out_storage[:, :, 0]
    run_op(batch, out)
    expected = reference.paged_attention(*batch.args())
    torch.testing.assert_close(out[:6], expected[:6], atol=2e-5, rtol=2e-5)
    assert bool((out[6:] == 7.0).all()) and bool((out_storage[:, :, 1] == 7.0).all())


@pytest.mark.parametrize("seed", range(12))
def test_random_batches(seed: int) -> None:
    rng = random.Random(seed)
    num_kv_heads = rng.choice([1, 2])
    seqs = []
    for _ in range(rng.randint(1, 5)):
        seq_len = rng.randint(1, 400)
        seqs.append((seq_len, rng.choice([0, 1, 1, rng.randint(1, min(seq_len, 48))])))
    batch = make_batch(
        seqs,
        num_heads=num_kv_heads * rng.choice([1, 2, 4]),
        num_kv_heads=num_kv_heads,
        head_dim=rng.choice([64, 128, 256]),
        block_size=rng.choice([8, 16, 32]),
        dtype=rng.choice([torch.float32, torch.bfloat16]),
        sliding_window=rng.choice([-1, -1, rng.randint(1, 200)]),
        logits_soft_cap=rng.choice([0.0, 0.0, 30.0]),
        seed=seed,
    )
    assert_matches_reference(batch)


def test_empty_batch_is_a_no_op() -> None:
    batch = make_batch([])
    out = run_op(batch)
    assert out.shape == (0, 4, 64)
