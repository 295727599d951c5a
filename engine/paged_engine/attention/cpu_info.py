"""What CPU this is, in one line for benchmark output: model name, the SIMD flags our kernels care about, the
instruction set the CPU kernels chose and what oneDNN's bf16 GEMMs run on. Figures from different machines are
only comparable with this beside them."""

from __future__ import annotations

import os
from pathlib import Path

CPU_ISAS = ("avx2", "avx512", "amx")  # the CPU kernels' instruction-set levels, in increasing order (csrc/cpu/isa.h)
# The CPU kernel families with more than one variant, each choosing its own (csrc/cpu/isa.h: Kernel).
CPU_KERNEL_FAMILIES = ("gemm", "attention", "elementwise")


def family_levels(family: str, dtype_name: str) -> tuple[str, ...]:
    """The levels at which a CPU kernel family has a variant of its own, for a model of ``dtype_name``: AMX
    multiplies bf16 matrices only, so only the attention over bf16 caches has an AMX variant (the kernels run
    their AVX-512 one at any higher level, which reporting ``amx`` would misname)."""
    return CPU_ISAS if family == "attention" and dtype_name == "bfloat16" else CPU_ISAS[:2]


FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16",
                     "amx_int8")  # fmt: skip


def cpu_model_and_flags() -> tuple[str, list[str]]:
    model, flags = "unknown CPU", []
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                present = set(value.split())
                flags = [f for f in FLAGS_OF_INTEREST if f in present]
    return model, flags


def bf16_gemm_unit() -> str:
    """What oneDNN's bf16 GEMMs (a bf16 model's linears, the rescored greedy head's bf16 copy) run on here:
    ``amx`` (the tile units, granted to this process), ``avx512_bf16`` (the AVX-512 bf16 dot products),
    ``avx512`` (bf16 converted in AVX-512 registers) or ``none`` (no fast bf16 GEMM: bf16 weights are not
    pre-packed). oneDNN picks the best the CPU reports; where ``ONEDNN_MAX_CPU_ISA`` caps it, the cap is named."""
    import torch

    if not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "none"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if cap != "ALL":
        return cap.lower()  # at most this, e.g. avx512_core_bf16
    _, flags = cpu_model_and_flags()
    if "amx_bf16" in flags and torch._C._cpu._init_amx():
        return "amx"
    return "avx512_bf16" if "avx512_bf16" in flags else "avx512"


def describe_cpu() -> str:
    """``AMD EPYC (avx2 fma avx512f ...), CPU kernels: gemm avx2, attention avx512 (...), bf16 GEMMs:
    avx512_bf16``; the kernels' part is omitted when they aren't loaded (benchmarks load them first)."""
    from paged_engine.attention import ops

    model, flags = cpu_model_and_flags()
    text = f"{model} ({' '.join(flags) or 'no AVX2'})"
    if ops.loaded():
        text += f", CPU kernels: {ops.describe_isas(ops.cpu_isas())} (supported: {', '.join(ops.supported_cpu_isas())})"
    return f"{text}, bf16 GEMMs: {bf16_gemm_unit()}"
