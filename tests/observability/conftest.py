"""Fixtures of the observability tests: promtool and helm from the test bed's cache, a real engine server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.cluster.binaries import Binaries
from tests.server.conftest import tiny_gemma_dir

__all__ = ["tiny_gemma_dir"]  # re-exported as a fixture for the live-scrape test


@pytest.fixture(scope="session")
def promtool(kube_binaries: Binaries) -> Path:
    return kube_binaries.promtool


@pytest.fixture(scope="session")
def helm(kube_binaries: Binaries) -> Path:
    return kube_binaries.helm


def run_tool(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a binary; a failure raises with its full output, which says what is wrong."""
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        command = " ".join(map(str, argv))
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result
