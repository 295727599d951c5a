"""``bf16_gemm_unit()``, shown as ``paged_engine_info{cpu_bf16_gemm}``: it must name what oneDNN really runs a
packed bf16 linear on, as oneDNN's own verbose log says, with and without an ``ONEDNN_MAX_CPU_ISA`` cap."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from paged_engine.kernels.cpu_isa import bf16_gemm_unit

LINEAR = """
import torch
from paged_engine.models.cpu_gemm import OneDNNLinear
OneDNNLinear(torch.randn(256, 128).bfloat16(), None)(torch.randn(16, 128).bfloat16())
"""

needs_bf16 = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no fast bf16 GEMM in oneDNN (the unit is 'none', checked below)",
)


def onednn_implementation(**env: str) -> str:
    """The implementation oneDNN ran the linear with, in a fresh process (the cap is read at its start)."""
    out = subprocess.run(
        [sys.executable, "-c", LINEAR], env={**os.environ, "ONEDNN_VERBOSE": "1", **env}, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    # onednn_verbose,v1,primitive,exec,cpu,<primitive>,<implementation>,...
    rows = [line.split(",") for line in out.splitlines() if line.startswith("onednn_verbose,v1,primitive,exec,")]
    (implementation,) = {row[6] for row in rows if row[5] in ("inner_product", "matmul")}
    return implementation


@needs_bf16
def test_names_the_unit_onednn_runs(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    unit, implementation = bf16_gemm_unit(), onednn_implementation()
    assert unit in ("amx", "avx512_bf16", "avx512"), unit
    assert ("amx" in implementation) == (unit == "amx"), (unit, implementation)
    if unit == "avx512_bf16":
        assert "bf16" in implementation, implementation


@needs_bf16
def test_a_cap_is_named_and_onednn_keeps_to_it(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert bf16_gemm_unit() == "avx512_core"
    assert "amx" not in onednn_implementation(ONEDNN_MAX_CPU_ISA="AVX512_CORE")


def test_none_without_a_fast_bf16_gemm(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert bf16_gemm_unit() == "none"
