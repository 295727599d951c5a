"""What CPU this is, in one line for benchmark output: model name, the SIMD flags our kernels care about, and the
instruction set the CPU kernels chose. Figures from different machines are only comparable with this beside them."""

from __future__ import annotations

from pathlib import Path

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


def describe_cpu() -> str:
    """``AMD EPYC (avx2 fma avx512f ...), CPU kernels: gemm avx2, attention avx512``; the kernels' part is
    omitted when they aren't loaded (benchmarks load them first)."""
    from paged_engine.attention import ops

    model, flags = cpu_model_and_flags()
    text = f"{model} ({' '.join(flags) or 'no AVX2'})"
    if ops.loaded():
        text += f", CPU kernels: {ops.describe_isas(ops.cpu_isas())} (supported: {', '.join(ops.supported_cpu_isas())})"
    return text
