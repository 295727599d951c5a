from __future__ import annotations

import pytest
from paged_engine.core import KVCacheManager, Request
from paged_engine.sampling_params import SamplingParams

from tests.core.helpers import make_config

BS = 4


def manager(num_blocks: int = 16, windows=(None,), caching: bool = True) -> KVCacheManager:
    return KVCacheManager(make_config(num_blocks, BS, windows), enable_caching=caching)


def request(kv: KVCacheManager, req_id: str, tokens: list[int], salt: str | None = None) -> Request:
    req = Request(req_id, tokens, SamplingParams(), cache_salt=salt)
    if kv.block_hasher is not None:
        req.attach_block_hasher(kv.block_hasher)
    return req


def prefill(kv: KVCacheManager, req: Request):
    """Look up, allocate the rest of the prompt and mark it computed and cached, like one scheduler step."""
    computed = kv.get_computed_blocks(req)
    alloc = kv.allocate_slots(req, req.num_tokens - computed.num_tokens, computed)
    assert alloc is not None
    req.num_computed_tokens = req.num_tokens
    kv.cache_blocks(req)
    return computed, alloc


def test_allocation_is_on_demand_and_reports_new_ids():
    kv = manager()
    req = request(kv, "a", list(range(6)))
    _, alloc = prefill(kv, req)
    assert [len(ids) for ids in alloc.new_block_ids] == [2]
    req.append_output_token(99)  # 7 tokens: still fits in block 2
    assert kv.allocate_slots(req, 1).new_block_ids == ([],)
    req.num_computed_tokens = 7
    req.append_output_token(98)
    req.append_output_token(97)  # the 9th token needs a third block
    alloc = kv.allocate_slots(req, 2)
    assert len(alloc.new_block_ids[0]) == 1 and kv.get_block_ids("a")[0][-1] == alloc.new_block_ids[0][0]


def test_allocate_returns_none_and_changes_nothing_when_pool_is_short():
    kv = manager(num_blocks=4)  # 3 usable
    a = request(kv, "a", list(range(8)))
    prefill(kv, a)
    b = request(kv, "b", list(range(100, 108)))
    free_before = kv.num_free_blocks
    assert kv.allocate_slots(b, 8) is None
    assert kv.num_free_blocks == free_before and not kv.holds_blocks("b")


def test_free_in_reverse_order_evicts_chain_tails_first():
    kv = manager(num_blocks=4)
    a = request(kv, "a", list(range(9)))  # 2 full blocks + 1 partial
    prefill(kv, a)
    first, second, partial = kv.get_blocks("a")[0]
    kv.free("a")
    queue = [b.block_id for b in kv.pool.free_queue]
    assert queue == [partial.block_id, second.block_id, first.block_id]


def test_prefix_hit_counts_full_blocks_and_leaves_last_token():
    kv = manager()
    prefill(kv, request(kv, "a", list(range(12))))
    same = request(kv, "b", list(range(12)))  # identical: floor(11 / 4) = 2 blocks hit
    assert kv.get_computed_blocks(same).num_tokens == 8
    longer = request(kv, "c", [*list(range(12)), 50, 51])
    assert kv.get_computed_blocks(longer).num_tokens == 12
    diverging = request(kv, "d", list(range(5)) + [77] * 8)
    assert kv.get_computed_blocks(diverging).num_tokens == 4
    assert kv.get_computed_blocks(request(kv, "e", list(range(12)), salt="x")).num_tokens == 0


def test_caching_disabled_never_hits():
    kv = manager(caching=False)
    prefill(kv, request(kv, "a", list(range(12))))
    assert kv.get_computed_blocks(request(kv, "b", list(range(12)))).num_tokens == 0


def test_evictable_hit_counts_against_capacity():
    kv = manager(num_blocks=4)  # 3 usable
    prefill(kv, request(kv, "a", list(range(8))))
    kv.free("a")  # both blocks cached and free
    b = request(kv, "b", [*list(range(8)), 1, 2, 3, 4, 5])  # hits 2 blocks, needs 2 more: 4 > 3
    computed = kv.get_computed_blocks(b)
    assert computed.num_tokens == 8
    assert kv.allocate_slots(b, 5, computed) is None
    assert all(block.ref_cnt == 0 for block in computed.blocks[0])


def test_fork_shares_partial_block_and_first_write_copies():
    kv = manager()
    parent = request(kv, "p", list(range(6)))  # blocks: [0..3] full, [4, 5] partial
    prefill(kv, parent)
    parent_blocks = kv.get_block_ids("p")[0]
    kv.fork("p", ["p-0", "p-1"])
    kv.free("p")
    children = []
    for cid in ("p-0", "p-1"):
        child = request(kv, cid, list(range(6)))
        child.num_computed_tokens = 6
        children.append(child)
    assert kv.get_block_ids("p-0") == kv.get_block_ids("p-1") == (parent_blocks,)
    assert [b.ref_cnt for b in kv.get_blocks("p-0")[0]] == [2, 2]
    children[0].append_output_token(1)
    alloc = kv.allocate_slots(children[0], 1)
    ((src, dst),) = alloc.copy_on_write
    assert src == parent_blocks[1] and dst not in parent_blocks
    assert kv.get_block_ids("p-0")[0] == [parent_blocks[0], dst]
    children[1].append_output_token(2)
    alloc = kv.allocate_slots(children[1], 1)  # now the only owner: writes in place
    assert alloc.copy_on_write == [] and kv.get_block_ids("p-1")[0] == parent_blocks
    with pytest.raises(ValueError, match="distinct"):
        kv.fork("p-0", ["x", "x"])
    used = kv.pool.num_used_blocks
    with pytest.raises(ValueError, match=r"cannot fork 'p-0' into \['p-1'\]: they already hold blocks"):
        kv.fork("p-0", ["y", "p-1"])
    assert kv.pool.num_used_blocks == used and not kv.holds_blocks("y")


def test_block_aligned_fork_needs_no_copy():
    kv = manager()
    prefill(kv, request(kv, "p", list(range(8))))
    kv.fork("p", ["p-0"])
    kv.free("p")
    child = request(kv, "p-0", list(range(8)))
    child.num_computed_tokens = 8
    child.append_output_token(3)
    alloc = kv.allocate_slots(child, 1)
    assert alloc.copy_on_write == [] and len(alloc.new_block_ids[0]) == 1


def test_sliding_window_frees_out_of_window_blocks_and_keeps_null_placeholders():
    kv = manager(num_blocks=40, windows=(None, 8))
    req = request(kv, "a", list(range(40)))
    prefill(kv, req)
    full, window = kv.get_blocks("a")
    assert len(full) == 10
    # The chunk started at token 0, so every block was needed while computing it.
    assert all(not b.is_null for b in window)
    for step in range(20):
        req.append_output_token(step)
        assert kv.allocate_slots(req, 1) is not None
        req.num_computed_tokens += 1
    full, window = kv.get_blocks("a")
    held = [b for b in window if not b.is_null]
    assert len(full) == 15 and len(window) == 15
    # Next token 60 attends to 53..60: blocks 13..15 at most.
    assert len(held) <= 3 and all(b.is_null for b in window[:12])
    kv.free("a")
    assert kv.usage == 0.0


def test_sliding_window_chunk_starting_late_skips_early_blocks():
    kv = manager(num_blocks=40, windows=(8,))
    prefill(kv, request(kv, "a", list(range(40))))
    kv.free("a")
    req = request(kv, "b", list(range(40)) + [7] * 4)
    computed = kv.get_computed_blocks(req)
    # Hit point 40 needs tokens 33..39 (blocks 8 and 9); blocks 0..7 are null placeholders.
    assert computed.num_tokens == 40
    assert [b.is_null for b in computed.blocks[0]] == [True] * 8 + [False] * 2
    req.num_computed_tokens = 0
    alloc = kv.allocate_slots(req, 4, computed)
    assert alloc.new_block_ids[0][:8] == [0] * 8
    assert kv.pool.num_used_blocks == 3


def evict(kv: KVCacheManager, block_hash, group: int) -> None:
    """Make one cached block's hash disappear, as reuse by another request would."""
    block = kv.pool.get_cached_block(block_hash, group)
    kv.pool.free_queue.remove(block)
    kv.pool._evict(block)
    kv.pool.free_queue.appendleft(block)


@pytest.mark.parametrize(("window", "expected"), [(8, 40), (None, 0)])
def test_sliding_window_hit_needs_the_window_not_the_whole_prefix(window, expected):
    kv = manager(num_blocks=40, windows=(window,))
    prefill(kv, request(kv, "a", list(range(40))))
    kv.free("a")
    req = request(kv, "b", list(range(41)))
    for index in range(3):  # the head of the chain is gone
        evict(kv, req.block_hashes[index], 0)
    assert kv.get_computed_blocks(req).num_tokens == expected


def test_hit_length_is_the_minimum_valid_for_every_group():
    kv = manager(num_blocks=64, windows=(None, 8))
    prefill(kv, request(kv, "a", list(range(40))))
    kv.free("a")
    # Drop the full-attention group's block 5: full attention now hits 5 blocks, so the window group
    # must be valid at 5 blocks too (blocks 3 and 4 present).
    req = request(kv, "b", list(range(41)))
    evict(kv, req.block_hashes[5], 0)
    computed = kv.get_computed_blocks(req)
    assert computed.num_tokens == 20
    assert [b.is_null for b in computed.blocks[1]] == [True, True, True, False, False]


def test_mismatched_block_sizes_are_refused():
    from paged_engine.core import FullAttentionSpec, KVCacheConfig, KVCacheGroup

    config = KVCacheConfig(8, (KVCacheGroup(FullAttentionSpec(4), ("a",)), KVCacheGroup(FullAttentionSpec(8), ("b",))))
    with pytest.raises(ValueError, match="one block size: got 8 and 4"):
        KVCacheManager(config)


def test_prefix_counters_count_taken_lookups_in_tokens():
    kv = manager()
    prefill(kv, request(kv, "a", list(range(12))))
    assert (kv.prefix_queries, kv.prefix_hits) == (12, 0)
    b = request(kv, "b", list(range(12)))
    kv.get_computed_blocks(b)  # a lookup whose result is not taken counts nothing
    assert (kv.prefix_queries, kv.prefix_hits) == (12, 0)
    prefill(kv, b)
    assert (kv.prefix_queries, kv.prefix_hits) == (24, 8)
