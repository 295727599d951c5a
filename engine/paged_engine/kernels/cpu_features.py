"""What this CPU is and what our CPU kernels can be built for: the model name, the SIMD flags the kernels care
about, the instruction-set levels and the kernel families that choose among them. Torch-free, so the API server
process and ``EngineConfig`` read these names without loading the kernels."""

from __future__ import annotations

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
