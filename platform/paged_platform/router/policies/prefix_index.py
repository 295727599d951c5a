"""The router's estimate of which prefixes each replica holds in its prefix cache (plain state).

Per replica, an LRU set of the chunk hashes (``router.prompt``) of the requests routed there, bounded to
``capacity`` chunks to mimic the engine evicting its least recently used blocks. It is an estimate: the engine
may have evicted sooner (its cache holds tokens and is shared by all clients) or kept longer, and a request that
failed still counts as routed. Because hashes chain, a replica's match is the count of leading chunks present.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixIndex:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"prefix index capacity must be >= 1 chunk, got {capacity}")
        self.capacity = capacity
        self._chunks: dict[str, OrderedDict[int, None]] = {}

    def match(self, url: str, chunks: Sequence[int]) -> int:
        """How many leading ``chunks`` the replica at ``url`` is believed to hold."""
        held = self._chunks.get(url)
        if not held:
            return 0
        matched = 0
        for chunk in chunks:
            if chunk not in held:
                break
            matched += 1
        return matched

    def insert(self, url: str, chunks: Sequence[int]) -> None:
        held = self._chunks.setdefault(url, OrderedDict())
        for chunk in chunks:
            held[chunk] = None
            held.move_to_end(chunk)
        while len(held) > self.capacity:
            held.popitem(last=False)

    def forget(self, url: str) -> None:
        self._chunks.pop(url, None)

    def size(self, url: str) -> int:
        return len(self._chunks.get(url, ()))
