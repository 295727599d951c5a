"""Fixtures for the kernel tests."""

from __future__ import annotations

import pytest
from paged_engine.attention import ops


@pytest.fixture(scope="session")
def kernels():
    """The loaded extension. A build failure fails the tests: CI has a compiler, so missing kernels are a bug."""
    return ops.load()


@pytest.fixture(params=["avx2", "avx512"])
def cpu_isa(request, kernels):
    """Each instruction-set variant of the CPU kernels this machine supports, in turn (AVX2 always), for every
    kernel family at once."""
    if request.param not in ops.supported_cpu_isas():
        pytest.skip(f"this CPU does not support {request.param}")
    before = ops.cpu_isas()
    ops.set_cpu_isa(request.param)
    yield request.param
    for kernel, isa in before.items():
        ops.set_cpu_isa(isa, kernel)
