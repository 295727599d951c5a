"""Chained hashes of full KV blocks: ``H(parent_hash, block_token_ids, extra_keys)``.

A block's hash identifies the whole prefix up to and including it, so equal hashes mean equal KV (for the
same model and group). Only full blocks are hashed; a partial block's content is still changing.

Two algorithms:

* ``sha256`` (default): SHA-256 over a canonical msgpack encoding. Stable across processes and runs, and
  collision-resistant, so a hit can be trusted even when prompts come from different users.
* ``builtin``: Python's ``hash`` of a tuple. Several times faster, but 64-bit (collisions are conceivable
  and would serve another prefix's KV) and, when extra keys hold strings, salted per process
  (``PYTHONHASHSEED``), so hashes cannot be compared across processes. Meant for benchmarks and trusted
  single-process deployments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from .request import Request

BlockHash = bytes | int
ExtraKeys = tuple[str | int, ...]
HashFunction = Callable[[BlockHash | None, Sequence[int], ExtraKeys], BlockHash]

_encoder = msgspec.msgpack.Encoder()


def sha256_block_hash(parent: BlockHash | None, token_ids: Sequence[int], extra_keys: ExtraKeys) -> bytes:
    # msgpack is canonical for ints, bytes, strings and arrays, and its framing keeps fields unambiguous.
    return hashlib.sha256(_encoder.encode((parent, token_ids, extra_keys))).digest()


def builtin_block_hash(parent: BlockHash | None, token_ids: Sequence[int], extra_keys: ExtraKeys) -> int:
    return hash((parent, tuple(token_ids), extra_keys))


HASH_FUNCTIONS: dict[str, HashFunction] = {"sha256": sha256_block_hash, "builtin": builtin_block_hash}


def get_hash_function(name: str) -> HashFunction:
    try:
        return HASH_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"unknown block hash algorithm {name!r}; choose one of {sorted(HASH_FUNCTIONS)}") from None


def block_extra_keys(block_index: int, cache_salt: str | None, adapter_id: str | None) -> ExtraKeys:
    """Keys besides the tokens that decide whether KV can be shared.

    The cache salt goes into the first block only: the chain carries it into every later hash, and
    tenants with different salts never share even their first block. The adapter id goes into every
    block because LoRA weights change the KV of every token.
    """
    keys: tuple[str | int, ...] = ()
    if block_index == 0 and cache_salt is not None:
        keys += ("salt", cache_salt)
    if adapter_id is not None:
        keys += ("adapter", adapter_id)
    return keys


def hash_block_tokens(
    token_ids: Sequence[int],
    block_size: int,
    hash_fn: HashFunction = sha256_block_hash,
    cache_salt: str | None = None,
    adapter_id: str | None = None,
) -> list[BlockHash]:
    """Hashes of every full block of ``token_ids``; the reference the incremental hasher must agree with."""
    hashes: list[BlockHash] = []
    parent: BlockHash | None = None
    for index in range(len(token_ids) // block_size):
        block = token_ids[index * block_size : (index + 1) * block_size]
        parent = hash_fn(parent, block, block_extra_keys(index, cache_salt, adapter_id))
        hashes.append(parent)
    return hashes


class BlockHasher:
    """Extends ``request.block_hashes`` with the hashes of blocks that became full since the last call."""

    def __init__(self, block_size: int, algorithm: str = "sha256") -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.block_size = block_size
        self.algorithm = algorithm
        self.hash_fn = get_hash_function(algorithm)

    def __call__(self, request: Request) -> None:
        hashes = request.block_hashes
        tokens = request.all_token_ids
        size = self.block_size
        index = len(hashes)
        while (index + 1) * size <= len(tokens):
            parent = hashes[-1] if hashes else None
            extra = block_extra_keys(index, request.cache_salt, request.adapter_id)
            hashes.append(self.hash_fn(parent, tokens[index * size : (index + 1) * size], extra))
            index += 1
