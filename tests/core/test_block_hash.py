from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_engine.core.block_hash import (
    BlockHasher,
    builtin_block_hash,
    hash_block_tokens,
    sha256_block_hash,
)
from paged_engine.core.request import Request
from paged_engine.sampling_params import SamplingParams


def test_only_full_blocks_are_hashed_and_chain_depends_on_the_prefix():
    a = hash_block_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = hash_block_tokens([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2 and len(b) == 2
    assert a[0] != b[0] and a[1] != b[1]  # same second block, different parent
    assert all(isinstance(h, bytes) and len(h) == 32 for h in a)


def test_extra_keys_salt_first_block_adapter_every_block():
    plain = hash_block_tokens([1, 2, 3, 4] * 2, 4)
    salted = hash_block_tokens([1, 2, 3, 4] * 2, 4, cache_salt="tenant-a")
    other = hash_block_tokens([1, 2, 3, 4] * 2, 4, cache_salt="tenant-b")
    adapter = hash_block_tokens([1, 2, 3, 4] * 2, 4, adapter_id="lora-1")
    assert len({plain[0], salted[0], other[0], adapter[0]}) == 4
    assert len({plain[1], salted[1], other[1], adapter[1]}) == 4


def test_sha256_is_stable_across_processes():
    code = (
        "from paged_engine.core.block_hash import hash_block_tokens;"
        "print(hash_block_tokens(list(range(8)), 4, cache_salt='s', adapter_id='a')[1].hex())"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert runs == {hash_block_tokens(list(range(8)), 4, cache_salt="s", adapter_id="a")[1].hex()}


def test_encoding_is_unambiguous():
    assert sha256_block_hash(None, [1, 2], ()) != sha256_block_hash(None, [1], (2,))
    assert sha256_block_hash(None, [1, 2], ()) != sha256_block_hash(b"", [1, 2], ())
    assert builtin_block_hash(None, [1, 2], ()) == builtin_block_hash(None, (1, 2), ())


@pytest.mark.parametrize("algorithm", ["sha256", "builtin"])
@given(tokens=st.lists(st.integers(0, 1000), max_size=40), extra=st.lists(st.integers(0, 1000), max_size=20))
def test_incremental_hashing_matches_whole_sequence(algorithm, tokens, extra):
    hasher = BlockHasher(4, algorithm)
    request = Request("r", tokens or [0], SamplingParams(), cache_salt="salt")
    request.attach_block_hasher(hasher)
    for token in extra:
        request.append_output_token(token)
    expected = hash_block_tokens(request.all_token_ids, 4, hasher.hash_fn, cache_salt="salt")
    assert request.block_hashes == expected


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown block hash algorithm 'md5'"):
        BlockHasher(4, "md5")
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        BlockHasher(0)
