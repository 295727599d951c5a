"""Fixtures for the kernel tests."""

from __future__ import annotations

import pytest
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_features import CPU_ISAS


@pytest.fixture(scope="session")
def kernels():
    """The loaded extension. A build failure fails the tests: CI has a compiler, so missing kernels are a bug."""
    return ops.load()


@pytest.fixture
def restore_cpu_isas(kernels):
    """Puts every kernel family back on the variant it had, whatever the test switched."""
    before = ops.cpu_isas()
    yield before
    for kernel, isa in before.items():
        ops.set_cpu_isa(isa, kernel)


@pytest.fixture(params=CPU_ISAS)
def cpu_isa(request, restore_cpu_isas):
    """Each instruction-set level of the CPU kernels this machine supports, in turn (AVX2 always), for every
    kernel family at once (a family without a variant at that level runs its highest one below it)."""
    if request.param not in ops.supported_cpu_isas():  # the check itself: test_supported_isas_are_what_the_cpu_reports
        pytest.skip(f"this CPU does not support {request.param}")
    ops.set_cpu_isa(request.param)
    return request.param
