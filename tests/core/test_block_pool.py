from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_engine.core.block_pool import BlockPool, FreeBlockQueue, KVBlock


def ids(blocks) -> list[int]:
    return [b.block_id for b in blocks]


def test_free_queue_pop_append_remove_middle():
    blocks = [KVBlock(i) for i in range(5)]
    queue = FreeBlockQueue(blocks)
    queue.remove(blocks[2])
    assert ids(queue) == [0, 1, 3, 4] and len(queue) == 4
    queue.appendleft(blocks[2])
    assert ids(queue) == [2, 0, 1, 3, 4]
    assert queue.popleft() is blocks[2]
    queue.append(blocks[2])
    assert ids(queue) == [0, 1, 3, 4, 2]
    with pytest.raises(ValueError, match="already in the free queue"):
        queue.append(blocks[0])
    taken = [queue.popleft() for _ in range(5)]
    assert ids(taken) == [0, 1, 3, 4, 2] and len(queue) == 0
    with pytest.raises(IndexError):
        queue.popleft()
    with pytest.raises(ValueError, match="not in the free queue"):
        queue.remove(blocks[0])


@given(st.lists(st.tuples(st.sampled_from(["pop", "append", "appendleft", "remove"]), st.integers(0, 7))))
def test_free_queue_matches_a_list_model(ops):
    blocks = [KVBlock(i) for i in range(8)]
    queue = FreeBlockQueue(blocks)
    model = list(range(8))
    for op, i in ops:
        if op == "pop" and model:
            assert queue.popleft().block_id == model.pop(0)
        elif op == "append" and i not in model:
            queue.append(blocks[i])
            model.append(i)
        elif op == "appendleft" and i not in model:
            queue.appendleft(blocks[i])
            model.insert(0, i)
        elif op == "remove" and i in model:
            queue.remove(blocks[i])
            model.remove(i)
        assert ids(queue) == model and len(queue) == len(model)


def test_null_block_is_never_handed_out():
    pool = BlockPool(4)
    assert pool.num_usable_blocks == 3 and pool.num_free_blocks == 3
    blocks = pool.get_new_blocks(3)
    assert 0 not in ids(blocks) and pool.usage == 1.0
    with pytest.raises(ValueError, match="cannot allocate 1 blocks: only 0 are free"):
        pool.get_new_blocks(1)
    pool.free_blocks([pool.null_block])  # a placeholder in a table: ignored
    assert pool.null_block.ref_cnt == 0 and pool.num_free_blocks == 0
    with pytest.raises(ValueError, match="at least 2"):
        BlockPool(1)


def test_uncached_blocks_go_to_the_front_cached_to_the_back():
    pool = BlockPool(6)
    a, b, c = pool.get_new_blocks(3)
    pool.cache_block(b, b"hb", 0)
    pool.free_blocks([a, b, c])
    # a and c (no hash) are reused before the untouched blocks; b (cached) last.
    assert ids(pool.free_queue) == [c.block_id, a.block_id, 4, 5, b.block_id]


def test_cached_block_keeps_hash_until_reused_and_hit_leaves_middle_of_queue():
    pool = BlockPool(4)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, b"ha", 0)
    pool.cache_block(b, b"hb", 0)
    pool.free_blocks([b, a])  # tail first: b is evicted before a
    assert pool.get_cached_block(b"ha", 0) is a and a.ref_cnt == 0
    assert pool.get_cached_block(b"ha", 1) is None  # keyed by group too
    pool.touch([b])  # hit while free: out of the middle of the queue
    assert b.ref_cnt == 1 and b.block_id not in ids(pool.free_queue)
    pool.free_blocks([b])
    (fresh,) = pool.get_new_blocks(1)  # block 3 (never used) first
    assert fresh.block_id == 3
    (reused,) = pool.get_new_blocks(1)
    assert reused is a and a.block_hash is None and pool.get_cached_block(b"ha", 0) is None
    assert pool.get_cached_block(b"hb", 0) is b


def test_duplicate_hash_keeps_the_first_block_canonical():
    pool = BlockPool(4)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, b"h", 0)
    pool.cache_block(b, b"h", 0)
    assert pool.get_cached_block(b"h", 0) is a and b.cache_key is None


def test_caching_disabled_caches_nothing():
    pool = BlockPool(4, enable_caching=False)
    (a,) = pool.get_new_blocks(1)
    pool.cache_block(a, b"h", 0)
    assert pool.get_cached_block(b"h", 0) is None


def test_reset_prefix_cache_refused_while_blocks_in_use():
    pool = BlockPool(4)
    (a,) = pool.get_new_blocks(1)
    pool.cache_block(a, b"h", 0)
    assert pool.reset_prefix_cache() is False
    assert pool.get_cached_block(b"h", 0) is a
    pool.free_blocks([a])
    assert pool.reset_prefix_cache() is True
    assert pool.get_cached_block(b"h", 0) is None and a.block_hash is None and pool.num_free_blocks == 3


def test_over_free_is_an_error():
    pool = BlockPool(3)
    (a,) = pool.get_new_blocks(1)
    pool.free_blocks([a])
    with pytest.raises(ValueError, match="freed more often"):
        pool.free_blocks([a])


@given(
    st.lists(
        st.tuples(st.sampled_from(["alloc", "free", "cache", "hit", "reset"]), st.integers(0, 9)),
        max_size=60,
    )
)
def test_pool_matches_a_reference_model_of_lru_eviction(ops):
    """The pool against a plain-list model: free order, ref counts and cached hashes after every operation."""
    pool = BlockPool(8)
    free = list(range(1, 8))  # model of the free queue, front first
    refs = dict.fromkeys(range(1, 8), 0)
    cached: dict[int, int] = {}  # hash -> block id
    held: list[int] = []  # one entry per reference taken
    for op, arg in ops:
        if op == "alloc" and free:
            block_id = free.pop(0)
            for h, b in list(cached.items()):
                if b == block_id:
                    del cached[h]  # evicted only now, when reused
            (block,) = pool.get_new_blocks(1)
            assert block.block_id == block_id
            refs[block_id] = 1
            held.append(block_id)
        elif op == "free" and held:
            block_id = held.pop(arg % len(held))
            pool.free_blocks([pool.blocks[block_id]])
            refs[block_id] -= 1
            if refs[block_id] == 0:
                if block_id in cached.values():
                    free.append(block_id)
                else:
                    free.insert(0, block_id)
        elif op == "cache" and held:
            block_id = held[arg % len(held)]
            pool.cache_block(pool.blocks[block_id], arg, 0)
            if arg not in cached and block_id not in cached.values():
                cached[arg] = block_id
        elif op == "hit" and arg in cached:
            block = pool.get_cached_block(arg, 0)
            assert block is not None and block.block_id == cached[arg]
            pool.touch([block])
            if refs[block.block_id] == 0:
                free.remove(block.block_id)
            refs[block.block_id] += 1
            held.append(block.block_id)
        elif op == "reset":
            done = pool.reset_prefix_cache()
            assert done == (not held)
            if done:
                cached.clear()
        assert ids(pool.free_queue) == free
        assert {b.block_id: b.ref_cnt for b in pool.blocks[1:]} == refs
        assert {key[0]: b.block_id for key, b in pool.cached.items()} == cached
