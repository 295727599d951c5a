"""Admin tokens are derived from the operator's key: stable, distinct per object, and the key file is checked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from paged_operator import admin_token
from paged_operator.admin_token import TokenKeyError, derive, load_key

KEY = b"k" * 32


def test_tokens_are_stable_and_distinct_per_object_and_key() -> None:
    assert derive(KEY, "uid-1") == derive(KEY, "uid-1")
    assert derive(KEY, "uid-1") != derive(KEY, "uid-2")
    assert derive(KEY, "uid-1") != derive(b"x" * 32, "uid-1")
    assert len(derive(KEY, "uid-1")) == 43 and "=" not in derive(KEY, "uid-1")  # 256 bits, URL-safe
    with pytest.raises(ValueError, match="uid is needed"):
        derive(KEY, "")


def test_key_file_is_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "key"
    good.write_bytes(KEY + b"\n")
    assert load_key(good) == KEY
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    with pytest.raises(TokenKeyError, match="the key has 3 bytes, at least 32 needed"):
        load_key(short)
    with pytest.raises(TokenKeyError, match="cannot read it"):
        load_key(tmp_path / "missing")


async def test_a_mounted_key_is_used_and_nothing_is_created(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("k" * 40)
    created: list[bytes] = []

    async def create(key: bytes) -> bool:
        created.append(key)
        return True

    assert await admin_token.obtain_key(path, create) == b"k" * 40 and created == []


async def test_with_nothing_mounted_a_new_key_is_stored_as_the_secret_and_used(tmp_path: Path) -> None:
    stored: list[bytes] = []

    async def create(key: bytes) -> bool:
        stored.append(key)
        return True

    key = await admin_token.obtain_key(tmp_path / "key", create)
    assert stored == [key] and len(key) >= admin_token.MIN_KEY_BYTES
    assert base64.b64decode(admin_token.secret_data(key)["key"]) == key  # what the kubelet will mount


async def test_a_key_another_replica_created_is_waited_for_until_mounted(tmp_path: Path) -> None:
    path = tmp_path / "key"

    async def taken(key: bytes) -> bool:
        path.write_text("m" * 40)  # the kubelet mounts the other replica's Secret meanwhile
        return False

    assert await admin_token.obtain_key(path, taken, poll_s=0.01) == b"m" * 40

    async def never_mounted(key: bytes) -> bool:
        return False

    with pytest.raises(admin_token.TokenKeyError, match="was not mounted within"):
        await admin_token.obtain_key(tmp_path / "absent", never_mounted, wait_s=0.05, poll_s=0.01)
