"""One cache variable: ``PAGED_CACHE``; the older ``PAGED_CACHE_DIR`` still works, with a deprecation warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from paged_engine import cache_home as module
from paged_engine.loader.gguf_loader import cache_root
from paged_engine.tokenizer.loader import default_cache_dir


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAGED_CACHE", raising=False)
    monkeypatch.delenv("PAGED_CACHE_DIR", raising=False)
    module._warn_deprecated.cache_clear()


def test_paged_cache_roots_every_engine_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert module.cache_home() == Path.home() / ".cache" / "paged"
    monkeypatch.setenv("PAGED_CACHE", str(tmp_path))
    assert (cache_root(), default_cache_dir()) == (tmp_path / "models", tmp_path / "tokenizers")


def test_the_old_name_still_works_and_says_it_is_deprecated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PAGED_CACHE_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=module.__name__):
        assert cache_root() == tmp_path / "models"
        assert default_cache_dir() == tmp_path / "tokenizers"
    assert [r.getMessage() for r in caplog.records] == [
        f"PAGED_CACHE_DIR is deprecated: set PAGED_CACHE={tmp_path} instead"
    ]


def test_the_new_name_wins_and_the_ignored_old_one_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PAGED_CACHE_DIR", str(tmp_path / "old"))
    monkeypatch.setenv("PAGED_CACHE", str(tmp_path / "new"))
    with caplog.at_level(logging.WARNING, logger=module.__name__):
        assert module.cache_home() == tmp_path / "new"
    assert "PAGED_CACHE_DIR=" in caplog.text and "is ignored" in caplog.text
