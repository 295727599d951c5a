"""``auto``'s choice of the panel GEMM's instruction set: the faster variant by median, measured once per CPU
and kernel build, then read from the cache; what it measures runs through the real kernels."""

from __future__ import annotations

import json

import pytest
from paged_engine.attention import isa_tune, ops

pytestmark = pytest.mark.usefixtures("kernels")


def test_fastest_keeps_the_first_unless_another_is_clearly_faster() -> None:
    assert isa_tune.fastest({"avx2": [1.0, 9.0, 9.0], "avx512": [1.5, 1.5, 1.5]}) == "avx2"  # best calls 1.0 vs 1.5
    assert isa_tune.fastest({"avx2": [2.0, 2.0], "avx512": [1.5, 9.0]}) == "avx512"  # 25 % faster at best
    assert isa_tune.fastest({"avx2": [2.0], "avx512": [1.95]}) == "avx2"  # within the margin: noise
    assert isa_tune.fastest({"avx2": [2.0]}) == "avx2"


def test_choice_is_measured_once_then_cached(tmp_path, monkeypatch) -> None:
    tune_file = tmp_path / "cpu_tune.json"
    calls = []
    monkeypatch.setattr(isa_tune, "_panel_gemm_runner", lambda: lambda isa: calls.append(isa))
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: {"avx2": [2.0], "avx512": [1.0]})
    path = ops.load().path
    assert isa_tune.choose_panel_isa(["avx2", "avx512"], path, tune_file) == "avx512"
    entry = json.loads(tune_file.read_text())[isa_tune.tune_key(path)]
    assert entry["isa"] == "avx512" and set(entry["ms"]) == {"avx2", "avx512"}
    monkeypatch.setattr(isa_tune, "measure", lambda names, run: pytest.fail("measured again despite the cache"))
    assert isa_tune.choose_panel_isa(["avx2", "avx512"], path, tune_file) == "avx512"
    assert isa_tune.choose_panel_isa(["avx2"], path, tune_file) == "avx2"  # one candidate: nothing to measure


def test_measurement_runs_every_supported_variant(cpu_isa) -> None:
    seconds = isa_tune.measure([cpu_isa], isa_tune._panel_gemm_runner(), repeats=2)
    assert len(seconds[cpu_isa]) == 2 and all(s > 0 for s in seconds[cpu_isa])
