"""Admin tokens are derived from the operator's key: stable, distinct per object, and the key file is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
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
