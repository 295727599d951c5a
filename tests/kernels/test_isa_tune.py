"""``auto``'s choice of each CPU kernel family's instruction set: the faster variant at its best call, measured
once per family, CPU and kernel build, then read from the cache; what it measures runs through the real
kernels."""

from __future__ import annotations

import json

import pytest
import torch
from paged_engine.kernels import isa_tune, ops
from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES

pytestmark = pytest.mark.usefixtures("kernels")


def test_fastest_keeps_the_first_unless_another_is_clearly_faster() -> None:
    assert isa_tune.fastest({"avx2": [1.0, 9.0, 9.0], "avx512": [1.5, 1.5, 1.5]}) == "avx2"  # best calls 1.0 vs 1.5
    assert isa_tune.fastest({"avx2": [2.0, 2.0], "avx512": [1.5, 9.0]}) == "avx512"  # 25 % faster at best
    assert isa_tune.fastest({"avx2": [2.0], "avx512": [1.95]}) == "avx2"  # within the margin: noise
    assert isa_tune.fastest({"avx2": [2.0]}) == "avx2"


def test_choice_is_measured_once_per_family_then_cached(tmp_path, monkeypatch) -> None:
    tune_file = tmp_path / "cpu_tune.json"
    timings = {
        "gemm": {"avx2": [1.0], "avx512": [1.0]},
        "attention": {"avx2": [2.0], "avx512": [1.0]},
        "elementwise": {"avx2": [2.0], "avx512": [1.9]},
    }
    monkeypatch.setattr(isa_tune, "_panel_gemm_runner", lambda: "gemm")
    monkeypatch.setattr(isa_tune, "_attention_runner", lambda dtype: "attention")
    monkeypatch.setattr(isa_tune, "_elementwise_runner", lambda dtype: "elementwise")
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: timings[run])
    path = ops.load().path
    choice = isa_tune.choose_isas(["avx2", "avx512"], path, torch.bfloat16, tune_file)
    assert choice == {"gemm": "avx2", "attention": "avx512", "elementwise": "avx2"}  # a clear win takes AVX-512
    cache = json.loads(tune_file.read_text())
    assert cache[isa_tune.tune_key(path, "attention-bfloat16")]["isa"] == "avx512"
    assert set(cache[isa_tune.tune_key(path, "gemm")]["ms"]) == {"avx2", "avx512"}
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: pytest.fail("measured again despite the cache"))
    assert isa_tune.choose_isas(["avx2", "avx512"], path, torch.bfloat16, tune_file) == choice
    only_avx2 = dict.fromkeys(CPU_KERNEL_FAMILIES, "avx2")
    assert isa_tune.choose_isas(["avx2"], path, torch.float32, tune_file) == only_avx2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_only_the_bf16_attention_is_timed_on_amx(tmp_path, monkeypatch, dtype) -> None:
    """AMX multiplies only bf16 and int8 matrices: the panel GEMM (fp32), the element-wise kernels and the
    attention over fp32 caches have no variant past AVX-512."""
    measured = {}
    monkeypatch.setattr(isa_tune, "_panel_gemm_runner", lambda: "gemm")
    monkeypatch.setattr(isa_tune, "_attention_runner", lambda dtype: "attention")
    monkeypatch.setattr(isa_tune, "_elementwise_runner", lambda dtype: "elementwise")
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: measured.setdefault(run, {n: [1.0] for n in names}))
    choice = isa_tune.choose_isas(["avx2", "avx512", "amx"], ops.load().path, dtype, tmp_path / "t.json")
    assert {family: list(seconds) for family, seconds in measured.items()} == {
        "gemm": ["avx2", "avx512"],
        "attention": ["avx2", "avx512", "amx"] if dtype == torch.bfloat16 else ["avx2", "avx512"],
        "elementwise": ["avx2", "avx512"],
    }
    assert choice == dict.fromkeys(CPU_KERNEL_FAMILIES, "avx2")


def test_attention_is_timed_per_kv_dtype(tmp_path, monkeypatch) -> None:
    measured = []
    monkeypatch.setattr(isa_tune, "_panel_gemm_runner", lambda: "gemm")
    monkeypatch.setattr(isa_tune, "_attention_runner", lambda dtype: measured.append(dtype) or "attention")
    monkeypatch.setattr(isa_tune, "_elementwise_runner", lambda dtype: "elementwise")
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: {"avx2": [1.0], "avx512": [1.0]})
    path, tune_file = ops.load().path, tmp_path / "cpu_tune.json"
    for dtype in (torch.float32, torch.bfloat16, torch.float32):
        isa_tune.choose_isas(["avx2", "avx512"], path, dtype, tune_file)
    assert measured == [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_measurement_runs_every_supported_variant(cpu_isa, dtype) -> None:
    for runner in (
        isa_tune._panel_gemm_runner(),
        isa_tune._attention_runner(dtype),
        isa_tune._elementwise_runner(dtype),
    ):
        seconds = isa_tune.measure([cpu_isa], runner, repeats=2)
        assert len(seconds[cpu_isa]) == 2 and all(s > 0 for s in seconds[cpu_isa])
