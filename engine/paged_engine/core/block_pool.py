"""The pool of physical KV blocks shared by every KV-cache group, with the prefix-cache index.

Eviction is lazy: a freed block that holds a cached prefix keeps its hash and stays findable while it
sits in the free queue; its hash is dropped only when the block is handed out again. The free queue is
therefore also the LRU list of the prefix cache:

* freed blocks without a hash go to the *front* (reused first, nothing is lost),
* freed cached blocks go to the *back* (most recently used last),
* a cached block hit while free is taken out of the middle in O(1).

Block 0 is the permanent *null block*: never handed out, never freed, used as the placeholder for
sliding-window blocks that fell out of the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .block_hash import BlockHash

CacheKey = tuple[BlockHash, int]  # (block hash, KV-cache group index)


class KVBlock:
    """One physical block. ``prev_free``/``next_free`` link it into the free queue while ``ref_cnt == 0``."""

    __slots__ = ("block_hash", "block_id", "cache_key", "is_null", "next_free", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.cache_key: CacheKey | None = None
        self.is_null = False
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None

    def __repr__(self) -> str:
        return f"KVBlock(id={self.block_id}, ref={self.ref_cnt}, cached={self.cache_key is not None})"


class FreeBlockQueue:
    """Doubly linked list of free blocks with sentinels: O(1) pop-front, append, append-left, remove."""

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._head = KVBlock(-1)
        self._tail = KVBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVBlock:
        first = self._head.next_free
        if first is self._tail or first is None:
            raise IndexError("no free blocks left")
        self.remove(first)
        return first

    def remove(self, block: KVBlock) -> None:
        prev, nxt = block.prev_free, block.next_free
        if prev is None or nxt is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append(self, block: KVBlock) -> None:
        self._insert_after(self._tail.prev_free, block)  # type: ignore[arg-type]

    def appendleft(self, block: KVBlock) -> None:
        self._insert_after(self._head, block)

    def _insert_after(self, anchor: KVBlock, block: KVBlock) -> None:
        if block.prev_free is not None or block.next_free is not None:
            raise ValueError(f"block {block.block_id} is already in the free queue")
        nxt = anchor.next_free
        assert nxt is not None
        block.prev_free = anchor
        block.next_free = nxt
        anchor.next_free = block
        nxt.prev_free = block
        self.num_free_blocks += 1

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free


class BlockPool:
    """Fixed set of ``num_blocks`` blocks (block 0 reserved as the null block)."""

    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2 (block 0 is the reserved null block), got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.is_null = True
        self.free_queue = FreeBlockQueue(self.blocks[1:])
        self.cached: dict[CacheKey, KVBlock] = {}

    # ---- capacity ---------------------------------------------------------------------------------------
    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_usable_blocks - self.free_queue.num_free_blocks

    @property
    def usage(self) -> float:
        """Used blocks / usable blocks, in [0, 1]; cached-but-free blocks count as free (evictable)."""
        return self.num_used_blocks / self.num_usable_blocks

    # ---- allocation -------------------------------------------------------------------------------------
    def get_new_blocks(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks from the front of the free queue, evicting their cached hashes."""
        if n > self.free_queue.num_free_blocks:
            raise ValueError(f"cannot allocate {n} blocks: only {self.free_queue.num_free_blocks} are free")
        out = []
        for _ in range(n):
            block = self.free_queue.popleft()
            if block.cache_key is not None:
                self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on prefix-cache hits; a hit that sat in the free queue leaves it."""
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVBlock]) -> None:
        """Drop one reference each; blocks reaching zero join the free queue in the given order."""
        for block in ordered_blocks:
            if block.is_null:
                continue
            if block.ref_cnt <= 0:
                raise ValueError(f"block {block.block_id} freed more often than referenced")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.cache_key is None:
                    self.free_queue.appendleft(block)
                else:
                    self.free_queue.append(block)

    # ---- prefix cache -----------------------------------------------------------------------------------
    def get_cached_block(self, block_hash: BlockHash, group: int) -> KVBlock | None:
        return self.cached.get((block_hash, group))

    def cache_block(self, block: KVBlock, block_hash: BlockHash, group: int) -> None:
        """Register a full, computed block. If the same prefix is already cached by another block (two
        requests computed it in the same step), the first one stays canonical and this one stays private."""
        if not self.enable_caching or block.is_null or block.cache_key is not None:
            return
        key = (block_hash, group)
        if key in self.cached:
            return
        block.block_hash = block_hash
        block.cache_key = key
        self.cached[key] = block

    def _evict(self, block: KVBlock) -> None:
        assert block.cache_key is not None
        del self.cached[block.cache_key]
        block.cache_key = None
        block.block_hash = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix. Refused (returns False, nothing changes) while any block is in use,
        because running requests may still be registering or relying on cached blocks."""
        if self.num_used_blocks > 0:
            return False
        for block in list(self.cached.values()):
            self._evict(block)
        return True
