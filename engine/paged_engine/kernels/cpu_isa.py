"""Which instruction-set variant each CPU kernel family runs, as the engine asks for it (``--cpu-isa``), and the
machine line benchmarks print beside their figures.

``auto`` takes, per family, whichever variant measures faster on this CPU (``isa_tune``); a level caps every family
at that level or the best this CPU supports below it, among the levels the family has a variant at
(``cpu_features.family_levels``).
"""

from __future__ import annotations

import os

import torch

from paged_engine.kernels import isa_tune, ops
from paged_engine.kernels.cpu_features import CPU_ISAS, CPU_KERNEL_FAMILIES, cpu_model_and_flags, family_levels


def cap_cpu_isa(level: str, kv_dtype: torch.dtype = torch.float32) -> dict[str, str]:
    """Run the CPU kernels at ``level`` (``auto``, or a cap: ``avx2``, ``avx512``, ``amx``), the attention's variant
    chosen for ``kv_dtype`` caches; returns the variant each family runs now. Loads the kernels first."""
    if level not in ("auto", *CPU_ISAS):
        raise ValueError(f"unknown CPU instruction set {level!r}; choose auto, {', '.join(CPU_ISAS)}")
    kernel_path = ops.load().path
    supported = [isa for isa in CPU_ISAS if isa in ops.supported_cpu_isas()]
    if level == "auto":
        for kernel, isa in isa_tune.choose_isas(supported, kernel_path, kv_dtype).items():
            ops.set_cpu_isa(isa, kernel)
    else:
        dtype_name = str(kv_dtype).removeprefix("torch.")
        for family in CPU_KERNEL_FAMILIES:
            levels = family_levels(family, dtype_name)
            below = [isa for isa in supported if CPU_ISAS.index(isa) <= CPU_ISAS.index(level) and isa in levels]
            ops.set_cpu_isa(below[-1], family)
    return ops.cpu_isas()


def describe_isas(isas: dict[str, str]) -> str:
    """``gemm avx2, attention avx512``, for logs and benchmark headers."""
    return ", ".join(f"{kernel} {isa}" for kernel, isa in isas.items())


def bf16_gemm_unit() -> str:
    """What oneDNN's bf16 GEMMs (a bf16 model's linears, the rescored greedy head's bf16 copy) run on here:
    ``amx`` (the tile units, granted to this process), ``avx512_bf16`` (the AVX-512 bf16 dot products),
    ``avx512`` (bf16 converted in AVX-512 registers) or ``none`` (no fast bf16 GEMM: bf16 weights are not
    pre-packed). oneDNN picks the best the CPU reports; where ``ONEDNN_MAX_CPU_ISA`` caps it, the cap is named."""
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
    model, flags = cpu_model_and_flags()
    text = f"{model} ({' '.join(flags) or 'no AVX2'})"
    if ops.loaded():
        text += f", CPU kernels: {describe_isas(ops.cpu_isas())} (supported: {', '.join(ops.supported_cpu_isas())})"
    return f"{text}, bf16 GEMMs: {bf16_gemm_unit()}"
