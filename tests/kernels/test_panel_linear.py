"""``paged::panel_linear``, the LM head's GEMM: equal to ``F.linear`` for any row count and width (tails of
strips and panels included), strided input rows, torch.library checks, and clear errors for bad arguments."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
from paged_engine.kernels.cpu_isa import cap_cpu_isa

pytestmark = pytest.mark.usefixtures("kernels")


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 5, 6, 7, 11, 12, 13, 64, 301])
@pytest.mark.parametrize(("out_features", "in_features"), [(16, 8), (100, 40), (40, 300), (1000, 640)])
def test_matches_dense_linear(rows, out_features, in_features, cpu_isa):
    gen = torch.Generator().manual_seed(rows * 7919 + out_features)
    weight = torch.randn(out_features, in_features, generator=gen)
    x = torch.randn(rows, in_features, generator=gen)
    out = ops.panel_linear(x, ops.pack_linear_weight(weight), out_features)
    assert out.shape == (rows, out_features)
    torch.testing.assert_close(out, F.linear(x, weight), rtol=1e-5, atol=1e-4)


def test_strided_rows_and_multiple_threads(cpu_isa):
    """Rows picked out of a wider activation (the runner's ``hidden[indices]`` case is contiguous; a column
    slice is not), with more panels than one thread's share."""
    weight = torch.randn(4099, 64)
    wide = torch.randn(9, 96)
    x = wide[:, 16:80]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = ops.panel_linear(x, ops.pack_linear_weight(weight), 4099)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(out, x @ weight.T, rtol=1e-5, atol=1e-4)


def test_supported_isas_are_what_the_cpu_reports():
    """The kernels' own CPUID check, on which every per-ISA test's skip ("this CPU does not support ...") rests,
    against the flags the Linux kernel reports: AVX-512 needs F, BW, VL and DQ; AMX needs AVX-512 and AMX-TILE and
    AMX-BF16 (and the kernel's permission to use the tiles, which /proc/cpuinfo cannot show)."""
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags = set(value.split())
            break
    if platform.machine() not in ("x86_64", "AMD64"):
        assert ops.supported_cpu_isas() == ["avx2"]  # the baseline name: scalar code off x86
        return
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    amx = avx512 and {"amx_tile", "amx_bf16"} <= flags
    expected = ["avx2", *(["avx512"] if avx512 else []), *(["amx"] if amx else [])]
    shown = sorted(f for f in flags if f.startswith(("avx", "amx")))
    assert ops.supported_cpu_isas() == expected, f"the CPU reports {shown}"


def test_every_cpu_reports_avx2_and_the_cap_never_exceeds_the_cpu(restore_cpu_isas):
    supported = ops.supported_cpu_isas()
    before = restore_cpu_isas
    assert "avx2" in supported and set(before) == set(CPU_KERNEL_FAMILIES)
    assert set(before.values()) <= set(supported)
    best = "avx512" if "avx512" in supported else "avx2"
    assert cap_cpu_isa("avx2") == dict.fromkeys(CPU_KERNEL_FAMILIES, "avx2")
    assert cap_cpu_isa("avx512") == dict.fromkeys(CPU_KERNEL_FAMILIES, best)
    assert set(cap_cpu_isa("auto").values()) <= set(supported)  # per family, the faster (test_isa_tune.py)
    # Only the attention over bf16 caches has an AMX variant: the rest stop at AVX-512.
    assert cap_cpu_isa("amx") == dict.fromkeys(CPU_KERNEL_FAMILIES, best)
    if "amx" in supported:
        assert cap_cpu_isa("amx", torch.bfloat16) == {"gemm": "avx512", "attention": "amx", "elementwise": "avx512"}
    else:
        assert cap_cpu_isa("amx", torch.bfloat16) == dict.fromkeys(CPU_KERNEL_FAMILIES, best)
        with pytest.raises(RuntimeError, match="does not support amx"):
            ops.set_cpu_isa("amx", "attention")
    with pytest.raises(ValueError, match="choose auto, avx2, avx512, amx"):
        cap_cpu_isa("sse2")
    with pytest.raises(RuntimeError, match="unknown kernel family 'norm'; choose gemm, attention or elementwise"):
        ops.set_cpu_isa("avx2", "norm")
    if "avx512" not in supported:
        with pytest.raises(RuntimeError, match="does not support avx512"):
            ops.set_cpu_isa("avx512")


@pytest.mark.usefixtures("restore_cpu_isas")
def test_each_kernel_family_keeps_its_own_variant():
    if "avx512" not in ops.supported_cpu_isas():  # test_supported_isas_are_what_the_cpu_reports checks this
        pytest.skip("this CPU lacks AVX-512: AVX2 is the only variant, so families have no other to differ by")
    ops.set_cpu_isa("avx2")
    ops.set_cpu_isa("avx512", "attention")
    assert ops.cpu_isas() == {"gemm": "avx2", "attention": "avx512", "elementwise": "avx2"}


def test_opcheck():
    weight = torch.randn(40, 24)
    torch.library.opcheck(torch.ops.paged.pack_linear_weight.default, (weight,))
    args = (torch.randn(5, 24), ops.pack_linear_weight(weight), 40)
    torch.library.opcheck(torch.ops.paged.panel_linear.default, args)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: ops.panel_linear(torch.randn(3, 24).double(), p, 40), "input must be Float"),
        (lambda p: ops.panel_linear(torch.randn(24), p, 40), r"input must be \[rows, in_features\]"),
        (lambda p: ops.panel_linear(torch.randn(3, 20), p, 40), r"packed_weight must have shape"),
        (lambda p: ops.panel_linear(torch.randn(3, 24), p, 60), r"packed_weight must have shape"),
        (lambda p: ops.panel_linear(torch.randn(24, 3).T, p, 40), "contiguous in its last dimension"),
        (lambda p: ops.pack_linear_weight(torch.randn(40, 24).T), "contiguous"),
        (lambda p: ops.pack_linear_weight(torch.randn(40, 24).half()), "weight must be Float"),
    ],
)
def test_bad_arguments_are_named(call, message):
    packed = ops.pack_linear_weight(torch.randn(40, 24))
    with pytest.raises(RuntimeError, match=message):
        call(packed)
