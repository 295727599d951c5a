"""KV-cache manager: prefix lookup, slot allocation, copy-on-write fork and freeing, across all KV-cache groups.

The scheduler talks to this class only; it never sees blocks of a single group. Every call either fully
succeeds or changes nothing (``allocate_slots`` returns None when the pool cannot satisfy it), so the
scheduler can try, preempt and retry without cleanup.

The model runner's block tables only ever grow by appended ids. A sliding-window block freed out of the
window keeps its stale id in the runner's table (the manager's own table holds the null block there): no
remaining token attends to it, so the runner never reads it. Copy-on-write replaces an entry in place, which
happens only in a forked child's first step, when the runner receives the child's whole table anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .block_hash import BlockHasher
from .block_pool import BlockPool, KVBlock
from .group_managers import GroupManager, make_group_manager
from .kv_cache_spec import KVCacheConfig
from .request import Request


@dataclass
class ComputedBlocks:
    """A prefix-cache hit: per group the blocks to reuse (null placeholders for out-of-window ones)."""

    blocks: tuple[list[KVBlock], ...]
    num_tokens: int


@dataclass(slots=True)
class SlotAllocation:
    """What one ``allocate_slots`` call changed, for the model runner."""

    new_block_ids: tuple[list[int], ...]  # appended to each group's table (null placeholders as block 0)
    copy_on_write: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) copies before the step


class KVCacheManager:
    def __init__(self, config: KVCacheConfig, enable_caching: bool = True, hash_algorithm: str = "sha256") -> None:
        if not config.groups:
            raise ValueError("KVCacheConfig needs at least one KV-cache group")
        block_size = config.block_size
        for group in config.groups:
            if group.spec.block_size != block_size:
                raise ValueError(
                    f"all KV-cache groups must share one block size: got {group.spec.block_size} and {block_size}"
                )
        self.config = config
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(config.num_blocks, enable_caching)
        self.groups: list[GroupManager] = [
            make_group_manager(group.spec, index, self.pool) for index, group in enumerate(config.groups)
        ]
        self.block_hasher = BlockHasher(block_size, hash_algorithm) if enable_caching else None
        self._num_cached_blocks: dict[str, int] = {}  # per request: leading blocks already registered
        self._group_range = range(len(self.groups))
        # Prefix-cache counters in tokens, cumulative. Counted when a lookup's result is taken by
        # allocate_slots, so a request retried at the head of the queue is counted once.
        self.prefix_queries = 0
        self.prefix_hits = 0

    # ---- capacity ---------------------------------------------------------------------------------------
    @property
    def usage(self) -> float:
        return self.pool.usage

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def max_blocks_for(self, num_tokens: int, max_chunk_tokens: int, extra_per_group: int = 0) -> int:
        """Upper bound on the blocks one request of ``num_tokens`` tokens ever holds across all groups, when
        it computes at most ``max_chunk_tokens`` per step. Used to refuse requests that could never run alone."""
        return sum(m.max_blocks(num_tokens, max_chunk_tokens) + extra_per_group for m in self.groups)

    # ---- prefix cache -----------------------------------------------------------------------------------
    def get_computed_blocks(self, request: Request, max_hit_tokens: int | None = None) -> ComputedBlocks:
        """Longest prefix of ``request`` cached for every group, block-aligned.

        At most ``request.num_tokens - 1`` tokens hit (or ``max_hit_tokens``): the last token is always
        computed so the model produces logits for it. Pure: nothing is counted or taken until
        ``allocate_slots`` accepts the hit.
        """
        if not self.enable_caching:
            return ComputedBlocks(tuple([] for _ in self.groups), 0)
        limit = request.num_tokens - 1 if max_hit_tokens is None else min(max_hit_tokens, request.num_tokens - 1)
        num_blocks = max(0, min(limit // self.block_size, len(request.block_hashes)))
        # Fixed point: each group's hit must be valid for the others' length too; lengths only shrink.
        while True:
            hits = [m.find_longest_cache_hit(request.block_hashes, num_blocks) for m in self.groups]
            shortest = min(len(h) for h in hits)
            converged = all(len(h) == shortest for h in hits)
            num_blocks = shortest
            if converged:
                break
        return ComputedBlocks(tuple(hits), num_blocks * self.block_size)

    def cache_blocks(self, request: Request) -> None:
        """Register the request's newly full and computed blocks (call after the step that computed them)."""
        if not self.enable_caching:
            return
        req_id = request.request_id
        end = min(request.num_computed_tokens // self.block_size, len(request.block_hashes))
        first = self._num_cached_blocks.get(req_id, 0)
        if end <= first or not self.holds_blocks(req_id):
            return
        for manager in self.groups:
            manager.cache_blocks(request, first, end)
        self._num_cached_blocks[req_id] = end

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()

    # ---- allocation -------------------------------------------------------------------------------------
    def allocate_slots(
        self, request: Request, num_new_tokens: int, computed: ComputedBlocks | None = None
    ) -> SlotAllocation | None:
        """Make room for ``num_new_tokens`` more tokens after the computed ones (plus a prefix hit).

        Returns None, changing nothing, when the pool cannot supply the blocks. Otherwise frees blocks that
        fell out of every sliding window, takes the prefix hit, copies a shared block about to be written
        (copy-on-write) and appends fresh blocks.
        """
        if num_new_tokens < 0:
            raise ValueError(f"num_new_tokens must be non-negative, got {num_new_tokens}")
        req_id = request.request_id
        if computed is None:
            num_computed = request.num_computed_tokens
            num_tokens = num_computed + num_new_tokens
            for manager in self.groups:
                if not manager.fits_unchanged(req_id, num_computed, num_tokens):
                    break
            else:
                return SlotAllocation(tuple([[] for _ in self._group_range]))
        if not self.can_allocate(request, num_new_tokens, computed):
            return None
        hit_blocks = computed.blocks if computed is not None else tuple([[] for _ in self._group_range])
        num_computed = request.num_computed_tokens + (computed.num_tokens if computed is not None else 0)
        num_tokens = num_computed + num_new_tokens

        for manager in self.groups:
            manager.remove_skipped_blocks(req_id, num_computed)
        for manager, hits in zip(self.groups, hit_blocks, strict=True):
            manager.save_computed_blocks(req_id, hits)
        copies: list[tuple[int, int]] = []
        new_ids: list[list[int]] = []
        for manager in self.groups:
            pair = manager.copy_on_write(req_id, num_computed, num_tokens)
            if pair is not None:
                copies.append(pair)
            new_ids.append([b.block_id for b in manager.allocate_new_blocks(req_id, num_computed, num_tokens)])
        if computed is not None:
            self.prefix_queries += request.num_tokens
            self.prefix_hits += computed.num_tokens
        if computed is not None and computed.num_tokens:
            # The runner has never seen the hit blocks either: report them as appended too.
            new_ids = [[b.block_id for b in hits] + ids for hits, ids in zip(hit_blocks, new_ids, strict=True)]
        return SlotAllocation(tuple(new_ids), copies)

    def can_allocate(self, request: Request, num_new_tokens: int, computed: ComputedBlocks | None = None) -> bool:
        """Whether ``allocate_slots`` with these arguments would succeed now (pure)."""
        req_id = request.request_id
        hit_blocks = computed.blocks if computed is not None else tuple([[] for _ in self._group_range])
        num_computed = request.num_computed_tokens + (computed.num_tokens if computed is not None else 0)
        num_tokens = num_computed + num_new_tokens
        available = self.pool.num_free_blocks
        needed = 0
        for manager, hits in zip(self.groups, hit_blocks, strict=True):
            available += manager.num_freeable_skipped(req_id, num_computed)
            needed += manager.num_blocks_to_allocate(req_id, num_computed, num_tokens, hits)
        return needed <= available

    def fork(self, parent_id: str, child_ids: Sequence[str]) -> None:
        """Give each child a reference to every parent block (partial last block included); the first
        write into a shared block then copies it (see ``allocate_slots``)."""
        if len(set(child_ids)) != len(child_ids):
            raise ValueError(f"child ids must be distinct, got {list(child_ids)}")
        holding = [c for c in child_ids if self.holds_blocks(c)]
        if holding:
            raise ValueError(f"cannot fork {parent_id!r} into {holding}: they already hold blocks")
        for manager in self.groups:
            manager.fork(parent_id, child_ids)
        num_cached = self._num_cached_blocks.get(parent_id, 0)
        for child_id in child_ids:
            self._num_cached_blocks[child_id] = num_cached

    def free(self, request_id: str) -> None:
        self._num_cached_blocks.pop(request_id, None)
        for manager in self.groups:
            manager.free(request_id)

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in m.req_to_blocks.get(request_id, ())] for m in self.groups)

    def get_blocks(self, request_id: str) -> tuple[list[KVBlock], ...]:
        return tuple(list(m.req_to_blocks.get(request_id, ())) for m in self.groups)

    def holds_blocks(self, request_id: str) -> bool:
        return request_id in self.groups[0].req_to_blocks  # every group gets a table on first allocation
