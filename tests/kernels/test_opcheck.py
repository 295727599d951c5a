"""torch.library.opcheck: schemas match what the kernels mutate, and the fake kernels let torch.compile trace."""

from __future__ import annotations

import pytest
import torch

from .batches import make_batch

pytestmark = pytest.mark.usefixtures("kernels")


def test_opcheck_paged_attention() -> None:
    batch = make_batch([(30, 6), (18, 1)])
    torch.library.opcheck(torch.ops.paged.paged_attention.default, (torch.zeros_like(batch.query), *batch.args()))


def test_opcheck_reshape_and_cache() -> None:
    args = (
        torch.randn(3, 2, 8),
        torch.randn(3, 2, 8),
        torch.zeros(4, 4, 2, 8),
        torch.zeros(4, 4, 2, 8),
        torch.tensor([0, -1, 9]),
    )
    torch.library.opcheck(torch.ops.paged.reshape_and_cache.default, args)


def test_opcheck_copy_blocks() -> None:
    args = ([torch.randn(4, 4, 2, 8)], [torch.randn(4, 4, 2, 8)], torch.tensor([[0, 3]]))
    torch.library.opcheck(torch.ops.paged.copy_blocks.default, args)


def test_opcheck_the_greedy_heads_ops() -> None:
    scores = torch.randn(4, 100)
    torch.library.opcheck(torch.ops.paged.argmax_rows.default, (scores,))
    torch.library.opcheck(torch.ops.paged.candidate_panels.default, (scores, torch.full((4,), 1.5)))


def test_torch_compile_traces_the_ops() -> None:
    """A compiled function that writes the cache then attends gives the eager result, with no graph break."""
    batch = make_batch([(12, 4)], num_heads=2, num_kv_heads=1)
    key = torch.randn(4, 1, 64)
    slots = (batch.block_tables[0, 0].long() * 16 + torch.arange(8, 12)).long()

    def step(query, key, key_cache, value_cache, slots, tables, qsl, lens):
        torch.ops.paged.reshape_and_cache(key, key, key_cache, value_cache, slots)
        out = torch.empty_like(query)
        torch.ops.paged.paged_attention(out, query, key_cache, value_cache, tables, qsl, lens, 0.125, -1, 0.0)
        return out * 2

    args = (
        batch.query,
        key,
        batch.key_cache,
        batch.value_cache,
        slots,
        batch.block_tables,
        batch.query_start_loc,
        batch.seq_lens,
    )
    eager = step(*[a.clone() for a in args])
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(*[a.clone() for a in args])
    torch.testing.assert_close(compiled, eager)
