"""Which attention backend serves a model: the one asked for where its kernels cover the model, else the torch
reference, with the reason logged once.

Pure policy (no torch import): the engine passes the device type, dtype name, head size and block size, and
whether the kernels were built (with CUDA or not). The kernel coverage below mirrors the dispatch tables in
``csrc/cpu/ops.cpp`` and ``csrc/cuda/ops.cu``; a model outside them (e.g. a head size of 48) is served by the
reference backend instead of failing on its first request. Only a contradiction the user must fix (the CUDA
kernels asked for on a CPU, a GPU with kernels built without CUDA) is an error, at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_HEAD_SIZES = (16, 32, 64, 80, 96, 128, 256)
CUDA_HEAD_SIZES = (64, 128, 256)
KERNEL_DTYPES = ("float32", "bfloat16")
BACKENDS = ("auto", "reference", "cpu", "cuda")


class AttentionSelectionError(ValueError):
    """The requested backend and device contradict each other; the message says what to change."""


@dataclass(frozen=True)
class AttentionShape:
    device_type: str  # "cpu" or "cuda"
    dtype: str  # "float32", "bfloat16", "float16"
    head_size: int
    block_size: int


@dataclass(frozen=True)
class KernelBuild:
    """What the kernel extension offers on this machine: ``available`` False when it could not be built."""

    available: bool
    with_cuda: bool = False
    why_unavailable: str = ""


@dataclass(frozen=True)
class Selection:
    backend: str  # the backend that serves: "reference", "cpu" or "cuda"
    reason: str | None = None  # why it is not the one asked for (None: it is)


def coverage_gap(shape: AttentionShape) -> str | None:
    """Why our kernels can't serve ``shape`` on its device, or None when they can."""
    sizes = CUDA_HEAD_SIZES if shape.device_type == "cuda" else CPU_HEAD_SIZES
    if shape.head_size not in sizes:
        return (
            f"head size {shape.head_size} is not one the {shape.device_type.upper()} kernels cover "
            f"({', '.join(map(str, sizes))})"
        )
    if shape.dtype not in KERNEL_DTYPES:
        return f"dtype {shape.dtype} is not one the kernels cover ({', '.join(KERNEL_DTYPES)})"
    return None


FLASH_DTYPES = ("bfloat16", "float16")


def flash_gap(compute_capability: tuple[int, int], dtype: str, head_size: int) -> str | None:
    """Why FlashAttention 4's paged prefill can't serve this model on this GPU, or None when it can. Its paged
    kernels exist for SM 9.x (head sizes 8..256) and SM 10.x/11.x (up to 128, or 256), in 16-bit dtypes."""
    major = compute_capability[0]
    if dtype not in FLASH_DTYPES:
        return f"dtype {dtype} (FlashAttention runs {', '.join(FLASH_DTYPES)})"
    if head_size % 8:
        return f"head size {head_size} is not a multiple of 8"
    if major == 9:
        return None if 8 <= head_size <= 256 else f"head size {head_size} is outside 8..256 on SM 9.x"
    if major in (10, 11):
        return None if head_size <= 128 or head_size == 256 else f"head size {head_size} on SM {major}.x"
    return f"no paged FlashAttention 4 kernel for SM {major}.{compute_capability[1]} (it has SM 9.x, 10.x, 11.x)"


def select(requested: str, shape: AttentionShape, kernels: KernelBuild) -> Selection:
    """The backend for ``requested`` (one of ``BACKENDS``) on this machine."""
    if requested not in BACKENDS:
        raise AttentionSelectionError(f"unknown attention backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested == "reference":
        return Selection("reference")
    on_gpu = shape.device_type == "cuda"
    kernel = "cuda" if on_gpu else "cpu"
    if requested not in ("auto", kernel):
        raise AttentionSelectionError(
            f"attention backend {requested!r} runs on the {requested.upper()}, but the engine runs on "
            f"{shape.device_type} (--device); use --attention-backend auto or {kernel}"
        )
    if not kernels.available:
        return Selection("reference", f"the paged kernels are unavailable ({kernels.why_unavailable})")
    if on_gpu and not kernels.with_cuda:
        raise AttentionSelectionError(
            "the engine runs on a GPU but the paged kernels were built without CUDA (no nvcc found at build time); "
            "install the CUDA toolkit or the nvidia-cuda-nvcc wheel and rebuild, or pass --attention-backend reference"
        )
    gap = coverage_gap(shape)
    if gap is not None:
        return Selection("reference", gap)
    return Selection(kernel)
