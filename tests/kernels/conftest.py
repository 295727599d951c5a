"""Fixtures for the kernel tests."""

from __future__ import annotations

import pytest
from paged_engine.attention import ops


@pytest.fixture(scope="session")
def kernels():
    """The loaded extension. A build failure fails the tests: CI has a compiler, so missing kernels are a bug."""
    return ops.load()
