"""Per-KV-cache-group block tables: full attention, and sliding window (which gives blocks back early).

Each manager owns, per request, the list of blocks of one group (logical block i holds tokens
``[i * block_size, (i + 1) * block_size)``). All groups draw from the same ``BlockPool``. The caller
(``KVCacheManager``) checks capacity across groups first, so the mutating methods here never fail half-way.
"""

from __future__ import annotations

from collections.abc import Sequence

from .block_hash import BlockHash
from .block_pool import BlockPool, KVBlock
from .kv_cache_spec import FullAttentionSpec, KVCacheSpec, SlidingWindowSpec
from .request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class GroupManager:
    """Block tables of one full-attention group; the base behaviour that sliding window refines."""

    def __init__(self, spec: KVCacheSpec, group: int, pool: BlockPool) -> None:
        self.spec = spec
        self.group = group
        self.pool = pool
        self.block_size = spec.block_size
        self.req_to_blocks: dict[str, list[KVBlock]] = {}

    # ---- prefix-cache lookup ----------------------------------------------------------------------------
    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_num_blocks: int) -> list[KVBlock]:
        """Longest valid hit for this group, at most ``max_num_blocks`` blocks (may contain null blocks)."""
        hits: list[KVBlock] = []
        for block_hash in block_hashes[:max_num_blocks]:
            block = self.pool.get_cached_block(block_hash, self.group)
            if block is None:
                break
            hits.append(block)
        return hits

    # ---- capacity (pure) --------------------------------------------------------------------------------
    def first_needed_block(self, num_computed_tokens: int) -> int:
        """Index of the first block any token from ``num_computed_tokens`` on still attends to."""
        return 0

    def num_freeable_skipped(self, request_id: str, num_computed_tokens: int) -> int:
        """Blocks that ``remove_skipped_blocks`` would return to the free queue."""
        return 0

    def max_blocks(self, num_tokens: int, max_chunk_tokens: int) -> int:
        """Most blocks a request of ``num_tokens`` tokens holds at once in this group."""
        return cdiv(num_tokens, self.block_size)

    def num_blocks_to_allocate(
        self, request_id: str, num_computed_tokens: int, num_tokens: int, new_computed: Sequence[KVBlock]
    ) -> int:
        """Free-queue blocks consumed to hold ``num_tokens`` tokens: fresh blocks, evictable cache hits
        leaving the free queue, and one copy if the first block written is shared (copy-on-write)."""
        table = self.req_to_blocks.get(request_id, ())
        num_existing = max(len(table) + len(new_computed), self.first_needed_block(num_computed_tokens))
        need = max(0, cdiv(num_tokens, self.block_size) - num_existing)
        need += sum(1 for block in new_computed if block.ref_cnt == 0 and not block.is_null)
        if self._shared_write_index(table, num_computed_tokens, num_tokens) is not None:
            need += 1
        return need

    def fits_unchanged(self, request_id: str, num_computed_tokens: int, num_tokens: int) -> bool:
        """Fast path of a decode step: the table already covers ``num_tokens``, the block written is private,
        and nothing fell out of the window, so allocation would change nothing."""
        table = self.req_to_blocks.get(request_id)
        if table is None or len(table) * self.block_size < num_tokens:
            return False
        return num_tokens <= num_computed_tokens or table[num_computed_tokens // self.block_size].ref_cnt == 1

    def _shared_write_index(self, table: Sequence[KVBlock], num_computed_tokens: int, num_tokens: int) -> int | None:
        if num_tokens <= num_computed_tokens:
            return None
        index = num_computed_tokens // self.block_size
        if index < len(table) and table[index].ref_cnt > 1:
            return index
        return None

    # ---- mutation ---------------------------------------------------------------------------------------
    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        """Give back blocks no remaining token attends to (none for full attention)."""

    def save_computed_blocks(self, request_id: str, new_computed: Sequence[KVBlock]) -> None:
        self.pool.touch(new_computed)
        self.req_to_blocks.setdefault(request_id, []).extend(new_computed)

    def copy_on_write(self, request_id: str, num_computed_tokens: int, num_tokens: int) -> tuple[int, int] | None:
        """Before writing into a block other requests share, swap in a private copy; returns (src, dst)."""
        table = self.req_to_blocks.get(request_id)
        if table is None:
            return None
        index = self._shared_write_index(table, num_computed_tokens, num_tokens)
        if index is None:
            return None
        src = table[index]
        (dst,) = self.pool.get_new_blocks(1)
        table[index] = dst
        self.pool.free_blocks([src])
        return (src.block_id, dst.block_id)

    def allocate_new_blocks(self, request_id: str, num_computed_tokens: int, num_tokens: int) -> list[KVBlock]:
        """Append blocks so the table covers ``num_tokens``; returns the appended entries (nulls included)."""
        table = self.req_to_blocks.setdefault(request_id, [])
        start = len(table)
        padding = self.first_needed_block(num_computed_tokens) - len(table)
        if padding > 0:
            table.extend([self.pool.null_block] * padding)
        need = cdiv(num_tokens, self.block_size) - len(table)
        if need > 0:
            table.extend(self.pool.get_new_blocks(need))
        return table[start:]

    def cache_blocks(self, request: Request, first: int, end: int) -> None:
        """Register the request's full, computed blocks ``[first, end)`` in the prefix cache."""
        table = self.req_to_blocks[request.request_id]
        hashes = request.block_hashes
        for index in range(first, end):
            block = table[index]
            if not block.is_null:
                self.pool.cache_block(block, hashes[index], self.group)

    def free(self, request_id: str) -> None:
        """Return the request's blocks, tail first, so the tail of a cached chain is evicted first."""
        table = self.req_to_blocks.pop(request_id, None)
        if table:
            self.pool.free_blocks(reversed(table))

    def fork(self, parent_id: str, child_ids: Sequence[str]) -> None:
        """Children share every block of the parent, the partial last one included (ref counts)."""
        table = self.req_to_blocks.get(parent_id, [])
        for child_id in child_ids:
            self.pool.touch(table)
            self.req_to_blocks[child_id] = list(table)


class FullAttentionManager(GroupManager):
    """Every token attends to every earlier token: blocks are kept until the request ends."""


class SlidingWindowManager(GroupManager):
    """A token attends to itself and the ``sliding_window - 1`` tokens before it.

    Blocks wholly before the window of every token still to be computed are freed and replaced by the null
    block, so a long request holds about ``sliding_window / block_size + 1`` blocks of this group.
    """

    def __init__(self, spec: SlidingWindowSpec, group: int, pool: BlockPool) -> None:
        super().__init__(spec, group, pool)
        if spec.sliding_window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {spec.sliding_window}")
        self.sliding_window = spec.sliding_window
        # Blocks before a block-aligned hit point that its next token attends to.
        self.window_blocks = cdiv(spec.sliding_window - 1, spec.block_size)

    def first_needed_block(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1) // self.block_size

    def max_blocks(self, num_tokens: int, max_chunk_tokens: int) -> int:
        # The window before a chunk plus the chunk itself, and one block of misalignment.
        window = cdiv(self.sliding_window - 1 + max_chunk_tokens, self.block_size) + 1
        return min(cdiv(num_tokens, self.block_size), window)

    def fits_unchanged(self, request_id: str, num_computed_tokens: int, num_tokens: int) -> bool:
        if not super().fits_unchanged(request_id, num_computed_tokens, num_tokens):
            return False
        # Null placeholders always form a prefix of the table: if the block just before the first needed
        # one is already null, there is nothing left to free.
        first = self.first_needed_block(num_computed_tokens)
        return first == 0 or self.req_to_blocks[request_id][first - 1].is_null

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_num_blocks: int) -> list[KVBlock]:
        """Scan right to left for the last point preceded by ``window_blocks`` cached blocks; earlier blocks
        are out of window and become null placeholders. A run reaching block 0 is valid at any length."""
        max_num_blocks = min(max_num_blocks, len(block_hashes))
        null = self.pool.null_block
        if self.window_blocks == 0:
            return [null] * max_num_blocks
        hits = [null] * max_num_blocks
        run = 0
        for index in range(max_num_blocks - 1, -1, -1):
            block = self.pool.get_cached_block(block_hashes[index], self.group)
            if block is None:
                run = 0
                continue
            hits[index] = block
            run += 1
            if run == self.window_blocks:
                return hits[: index + run]
        return hits[:run]

    def _skipped_range(self, request_id: str, num_computed_tokens: int) -> list[KVBlock]:
        table = self.req_to_blocks.get(request_id, ())
        out = []
        for index in range(min(self.first_needed_block(num_computed_tokens), len(table)) - 1, -1, -1):
            block = table[index]
            if block.is_null:
                break  # everything before was skipped earlier
            out.append(block)
        return out

    def num_freeable_skipped(self, request_id: str, num_computed_tokens: int) -> int:
        return sum(1 for block in self._skipped_range(request_id, num_computed_tokens) if block.ref_cnt == 1)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        skipped = self._skipped_range(request_id, num_computed_tokens)
        if not skipped:
            return
        table = self.req_to_blocks[request_id]
        null = self.pool.null_block
        last = min(self.first_needed_block(num_computed_tokens), len(table))
        for index in range(last - len(skipped), last):
            table[index] = null
        self.pool.free_blocks(skipped)


def make_group_manager(spec: KVCacheSpec, group: int, pool: BlockPool) -> GroupManager:
    if isinstance(spec, SlidingWindowSpec):
        return SlidingWindowManager(spec, group, pool)
    if isinstance(spec, FullAttentionSpec):
        return FullAttentionManager(spec, group, pool)
    raise TypeError(f"unsupported KV-cache spec {spec!r}")
