"""Which instruction-set variant of each CPU kernel family serves ``auto``: the faster one on this CPU, measured
once per family.

Wider vectors are not faster everywhere, nor for every kernel alike: AVX-512 doubles the multiply-adds per
instruction, which pays on CPUs with two 512-bit FMA pipes, while Zen 4 issues each 512-bit FMA as two halves, so
there its panel GEMM variants tie while its attention (more shuffles and reductions per byte) gains from the
wider registers. So ``auto`` times each family's variants, alternating them, on the shapes where serving spends
its time: the panel GEMM on a weight larger than the caches at one and 32 rows (its variants stop at AVX-512);
the attention at a serving step of 16 sequences, 15 decoding over 512 tokens each and one prefilling a 256-token
chunk (Gemma 3 270M's heads), with the engine's KV dtype: the AMX variant gains most on the chunk, so a
decode-only shape would undersell it; the element-wise kernels on a 512-token step's GELU and norms, in the
model's dtype. It keeps AVX2 unless another variant is clearly faster (``fastest``). Each choice is cached per
family, CPU model, flags and kernel build in ``~/.cache/paged/cpu_tune.json`` (``PAGED_CACHE``), so later
starts cost nothing, and logged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from paged_engine.kernels import ops
from paged_engine.kernels.build import CACHE_ROOT
from paged_engine.kernels.cpu_features import cpu_model_and_flags, family_levels

log = logging.getLogger(__name__)

TUNE_FILE = CACHE_ROOT.parent / "cpu_tune.json"
TUNE_ROWS = (1, 32)
TUNE_REPEATS = 9
MARGIN = 0.05


def fastest(seconds: dict[str, list[float]]) -> str:
    """The first listed variant (the narrower, more widely tested one) unless another's best call is faster by
    more than ``MARGIN``. Best calls, not medians: a busy neighbour only ever adds time, so the minimum is the
    figure least disturbed by it, and the margin keeps noise from flipping the choice."""
    first, *others = seconds
    best = {name: min(times) for name, times in seconds.items()}
    challenger = min(others, key=best.__getitem__, default=first)
    return challenger if best[challenger] < best[first] * (1 - MARGIN) else first


def measure(
    candidates: Sequence[str], run: Callable[[str], None], repeats: int = TUNE_REPEATS
) -> dict[str, list[float]]:
    """Seconds per call of ``run(variant)``, variants alternating so a busy neighbour slows all alike."""
    for name in candidates:
        run(name)  # warm-up: first touch of the strips and tiles
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name in candidates:
            start = time.perf_counter()
            run(name)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def tune_key(kernel_path: Path, family: str) -> str:
    model, flags = cpu_model_and_flags()
    return f"{family}|{model}|{' '.join(flags)}|{kernel_path.parent.name}"


def choose_isas(
    candidates: Sequence[str], kernel_path: Path, kv_dtype: torch.dtype, tune_file: Path = TUNE_FILE
) -> dict[str, str]:
    """The faster of ``candidates`` per kernel family (``{"gemm": ..., "attention": ..., "elementwise": ...}``),
    from the cache or measured now (and cached). ``kv_dtype`` is the model's dtype, that of the caches and of the
    activations the element-wise kernels see."""
    dtype_name = str(kv_dtype).removeprefix("torch.")

    runners = {
        "gemm": ("gemm", _panel_gemm_runner),
        "attention": (f"attention-{dtype_name}", lambda: _attention_runner(kv_dtype)),
        "elementwise": (f"elementwise-{dtype_name}", lambda: _elementwise_runner(kv_dtype)),
    }
    return {
        family: choose_isa(
            key, [isa for isa in candidates if isa in family_levels(family, dtype_name)], make, kernel_path, tune_file
        )
        for family, (key, make) in runners.items()
    }


def choose_isa(
    family: str,
    candidates: Sequence[str],
    make_runner: Callable[[], Callable[[str], None]],
    kernel_path: Path,
    tune_file: Path = TUNE_FILE,
) -> str:
    """The faster of ``candidates`` for one kernel family, from the cache or measured now (and cached)."""
    if len(candidates) == 1:
        return candidates[0]
    key = tune_key(kernel_path, family)
    cache = _read(tune_file)
    entry = cache.get(key)
    if entry and entry.get("isa") in candidates:
        return entry["isa"]
    seconds = measure(candidates, make_runner())
    choice = fastest(seconds)
    best = {name: round(min(s) * 1e3, 3) for name, s in seconds.items()}
    log.info("CPU kernels: measured the %s kernel per instruction set (best ms per call: %s); using %s", family,
             best, choice)  # fmt: skip
    cache[key] = {"isa": choice, "ms": best, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write(tune_file, cache)
    return choice


def _panel_gemm_runner() -> Callable[[str], None]:
    gen = torch.Generator().manual_seed(0)
    panels = ops.pack_linear_weight(torch.randn(16384, 640, generator=gen))  # 40 MiB: past any L3 share
    inputs = [torch.randn(rows, 640, generator=gen) for rows in TUNE_ROWS]

    def run(isa: str) -> None:
        ops.set_cpu_isa(isa, "gemm")
        for x in inputs:
            ops.panel_linear(x, panels, 16384)

    return run


def _attention_runner(kv_dtype: torch.dtype) -> Callable[[str], None]:
    seqs, context, chunk, block, heads, kv_heads, head_dim = 16, 512, 256, 16, 4, 1, 256
    gen = torch.Generator().manual_seed(0)
    blocks = seqs * context // block
    shape = (blocks, block, kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen).to(kv_dtype)
    value_cache = torch.randn(shape, generator=gen).to(kv_dtype)
    block_tables = torch.randperm(blocks, generator=gen).view(seqs, -1).int()  # scattered, as a pool's are
    query_lens = torch.tensor([chunk] + [1] * (seqs - 1), dtype=torch.int32)
    query_start_loc = torch.cat([torch.zeros(1, dtype=torch.int32), query_lens.cumsum(0, dtype=torch.int32)])
    seq_lens = torch.tensor([chunk] + [context] * (seqs - 1), dtype=torch.int32)
    query = torch.randn(int(query_lens.sum()), heads, head_dim, generator=gen).to(kv_dtype)
    out = torch.empty_like(query)

    def run(isa: str) -> None:
        ops.set_cpu_isa(isa, "attention")
        for _ in range(4):  # 0.6-1.5 ms a call here: four per sample outweigh a scheduler hiccup
            ops.paged_attention(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                                head_dim**-0.5)  # fmt: skip

    return run


def _elementwise_runner(dtype: torch.dtype) -> Callable[[str], None]:
    gen = torch.Generator().manual_seed(0)
    gate_up = torch.randn(512, 2 * 2048, generator=gen).to(dtype)  # a 512-token step of Gemma 3 270M's MLP
    hidden = torch.randn(512, 640, generator=gen).to(dtype)
    weight = torch.randn(640, generator=gen).to(dtype)

    def run(isa: str) -> None:
        ops.set_cpu_isa(isa, "elementwise")
        ops.gated_activation("gelu_tanh", gate_up)
        for _ in range(4):  # a layer's four norms
            ops.rms_norm(hidden, weight, 1e-6, 1.0)

    return run


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, cache: dict) -> None:
    """Atomically (a temporary file renamed over it), so a concurrent start never reads half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
    except OSError as exc:  # a read-only cache only costs a measurement at the next start
        log.warning("could not cache the CPU tuning in %s: %s", path, exc)
