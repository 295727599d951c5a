"""Fixtures for model-source tests: a fake hub on loopback and a ``paged-engine download`` runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sources.hub_server import HubServer, HubState, Repo

TOKEN = "hf_test_token_0123456789"
REPO_ID = "acme/tiny"
GATED_ID = "acme/gated"
#: One file big enough (4 MiB) that a slowed download can be interrupted in its middle.
WEIGHTS = os.urandom(4 << 20)


def repo_files() -> dict[str, bytes]:
    """What a hub repo holds: serving files, plus files the engine must not download."""
    return {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).encode(),
        "model.safetensors": WEIGHTS,
        "tokenizer.json": b'{"version": "1.0"}',
        "tokenizer_config.json": b"{}",
        "generation_config.json": b'{"eos_token_id": 2}',
        "README.md": b"# tiny",
        "pytorch_model.bin": b"\0" * 1024,
        "original/consolidated.pth": b"\0" * 1024,
    }


SERVING = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}


def private_cache(folder: Path) -> Path:
    """A ``PAGED_CACHE`` of the test's own for models and tokenizers that shares the compiled kernels and their
    tuning with the usual cache (``PAGED_CACHE`` moves those too, and a kernel build takes minutes)."""
    from paged_engine.kernels.build import CACHE_ROOT
    from paged_engine.kernels.isa_tune import TUNE_FILE

    folder.mkdir(parents=True, exist_ok=True)
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    (folder / CACHE_ROOT.name).symlink_to(CACHE_ROOT, target_is_directory=True)
    if TUNE_FILE.is_file():
        (folder / TUNE_FILE.name).symlink_to(TUNE_FILE)
    return folder


@pytest.fixture
def hub() -> Iterator[HubServer]:
    state = HubState(
        repos={
            REPO_ID: Repo(repo_files(), branches={"main": "a" * 40, "v1": "b" * 40}, commit="a" * 40),
            GATED_ID: Repo(repo_files(), gated_token=TOKEN),
            "acme/bin-only": Repo({"config.json": b"{}", "pytorch_model.bin": b"\0" * 16}),
        }
    )
    with HubServer(state) as server:
        yield server


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def download(hub: HubServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Runs ``paged-engine download`` against the fake hub; HF_HOME and the engine cache are per test."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
        environment = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf-home"),
            "PAGED_CACHE": str(tmp_path / "cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
            **(env or {}),
        }
        environment.pop("HF_TOKEN", None) if env is None or "HF_TOKEN" not in env else None
        done = subprocess.run(
            [sys.executable, "-m", "paged_engine.cli", "download", *args],
            capture_output=True, text=True, env=environment, timeout=timeout,
        )  # fmt: skip
        return Run(done.returncode, done.stdout.strip(), done.stderr)

    return run
