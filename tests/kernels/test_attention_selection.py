"""Which attention backend serves a model: our kernels where they cover it, the torch reference otherwise (with
the reason), and a clear start-up error only for contradictions the user must fix."""

from __future__ import annotations

import pytest
from paged_engine.attention.selection import (
    CPU_HEAD_SIZES,
    CUDA_HEAD_SIZES,
    KERNEL_DTYPES,
    AttentionSelectionError,
    AttentionShape,
    KernelBuild,
    Selection,
    select,
)

BUILT = KernelBuild(True, with_cuda=True)
HEAD_SIZES = range(16, 257, 16)


@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_head_size_is_served(device: str, head_size: int) -> None:
    covered = head_size in (CUDA_HEAD_SIZES if device == "cuda" else CPU_HEAD_SIZES)
    for requested in ("auto", device):
        chosen = select(requested, AttentionShape(device, "float32", head_size, 16), BUILT)
        if covered:
            assert chosen.backend == device and chosen.reason is None
        else:
            assert chosen.backend == "reference"
            assert f"head size {head_size} is not one the {device.upper()} kernels cover" in str(chosen.reason)


def test_dtypes_the_kernels_do_not_cover_fall_back() -> None:
    chosen = select("auto", AttentionShape("cuda", "float16", 128, 16), BUILT)
    assert chosen.backend == "reference" and "dtype float16" in str(chosen.reason)
    assert select("auto", AttentionShape("cpu", "bfloat16", 64, 16), BUILT).backend == "cpu"


def test_without_kernels_the_reference_serves_and_says_why() -> None:
    missing = KernelBuild(False, why_unavailable="no C++ compiler (c++ or $CXX) on PATH")
    chosen = select("auto", AttentionShape("cpu", "float32", 64, 16), missing)
    assert chosen.backend == "reference" and "no C++ compiler" in str(chosen.reason)


def test_reference_is_always_available() -> None:
    assert select("reference", AttentionShape("cuda", "float16", 48, 7), KernelBuild(False)).backend == "reference"


@pytest.mark.parametrize(
    ("requested", "shape", "kernels", "message"),
    [
        ("cuda", AttentionShape("cpu", "float32", 64, 16), BUILT, "runs on the CUDA, but the engine runs on cpu"),
        ("cpu", AttentionShape("cuda", "bfloat16", 64, 16), BUILT, "runs on the CPU, but the engine runs on cuda"),
        ("auto", AttentionShape("cuda", "bfloat16", 64, 16), KernelBuild(True), "built without CUDA"),
        ("flash", AttentionShape("cpu", "float32", 64, 16), BUILT, "unknown attention backend 'flash'"),
    ],
)
def test_contradictions_are_start_up_errors(requested, shape, kernels, message) -> None:
    with pytest.raises(AttentionSelectionError, match=message):
        select(requested, shape, kernels)


def test_an_unbuildable_extension_reads_as_unavailable(monkeypatch) -> None:
    from paged_engine.engine import startup
    from paged_engine.kernels import ops

    def no_compiler():  # type: ignore[no-untyped-def]
        raise ops.KernelBuildError("no C++ compiler (c++ or $CXX) on PATH")

    monkeypatch.setattr(ops, "load", no_compiler)
    assert startup.kernel_build() == KernelBuild(False, why_unavailable="no C++ compiler (c++ or $CXX) on PATH")


def test_auto_serves_our_cpu_kernels_on_this_machine() -> None:
    """CI has a C++ compiler, so the kernels build (the ``kernels`` fixture fails otherwise): on the CPU ``auto``
    must serve every head size and dtype they cover with them. The server tests rely on it (they run the default
    and compare it with the reference); the rules above say when it would not."""
    from paged_engine.engine import startup

    build = startup.kernel_build()
    assert build.available, build.why_unavailable
    for head_size in CPU_HEAD_SIZES:
        for dtype in KERNEL_DTYPES:
            assert select("auto", AttentionShape("cpu", dtype, head_size, 16), build) == Selection("cpu")
