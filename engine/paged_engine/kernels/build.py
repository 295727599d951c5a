"""Finds or builds the kernel extension: an ahead-of-time ``paged_engine._C`` when the install built one, else a
JIT build of ``csrc/`` cached under ``~/.cache/paged/torch_extensions/<torch>-<source hash>/``.

The extension registers the ``paged`` torch ops from C++ static initialisers, so "loading" is just
``torch.ops.load_library``; there is no Python module to import. A machine with a GPU and a CUDA toolkit gets one
library holding both the CPU and the CUDA kernels; every other machine gets the CPU kernels alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CSRC = Path(os.environ.get("PAGED_CSRC", Path(__file__).resolve().parents[3] / "csrc"))
CACHE_ROOT = Path(os.environ.get("PAGED_CACHE", Path.home() / ".cache" / "paged")) / "torch_extensions"
DEFAULT_CUDA_ARCH = "90"  # H100/H200; override with PAGED_CUDA_ARCH, e.g. "80" or "90,100"


class KernelBuildError(RuntimeError):
    """The kernels could not be found or built; the message says why and what the caller falls back to."""


@dataclass(frozen=True)
class Extension:
    path: Path
    with_cuda: bool
    how: str  # "aot" or "jit"


def cpu_flags() -> list[str]:
    """Compiler flags for the host CPU: AVX2+FMA only where torch detected them (builds are per machine)."""
    flags = ["-O3", "-fopenmp", "-DNDEBUG"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma"]
    return flags


def cuda_arch_flags(arch: str | None = None) -> list[str]:
    arch = arch or os.environ.get("PAGED_CUDA_ARCH", DEFAULT_CUDA_ARCH)
    flags = []
    for a in arch.replace(";", ",").split(","):
        a = a.strip().replace(".", "")
        if not a.rstrip("af").isdigit():
            raise KernelBuildError(f"PAGED_CUDA_ARCH entry {a!r} is not an SM version such as 90 or 90a")
        flags.append(f"-gencode=arch=compute_{a},code=sm_{a}")
    return flags


def cpu_sources() -> list[Path]:
    return [CSRC / "cpu" / "ops.cpp"]


def cuda_sources() -> list[Path]:
    return sorted((CSRC / "cuda").glob("*.cu"))


def find_cuda_home() -> Path | None:
    """A CUDA toolkit with nvcc: the one torch finds (``CUDA_HOME``, nvcc on PATH, /usr/local/cuda), else the
    ``nvidia-cuda-nvcc`` wheel's (``site-packages/nvidia/cu13``, with the runtime headers beside it)."""
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is not None and Path(cpp_extension.CUDA_HOME, "bin", "nvcc").exists():
        return Path(cpp_extension.CUDA_HOME)
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for nvcc in sorted(Path(root).glob("cu*/bin/nvcc")):
            return nvcc.parent.parent
    return None


def wants_cuda() -> bool:
    """Build the CUDA kernels only where torch has CUDA, a device is visible and nvcc can be found."""
    return bool(torch.version.cuda and torch.cuda.is_available()) and find_cuda_home() is not None


def _source_hash(flags: list[str]) -> str:
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in sorted(p for p in CSRC.rglob("*") if p.suffix in {".h", ".inc", ".cuh", ".cpp", ".cu"}):
        digest.update(str(path.relative_to(CSRC)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _aot_library() -> Path | None:
    spec = importlib.util.find_spec("paged_engine._C")
    return Path(spec.origin) if spec and spec.origin else None


def _jit_build(with_cuda: bool) -> Path:
    if not (CSRC / "cpu" / "ops.cpp").exists():
        raise KernelBuildError(f"kernel sources not found under {CSRC} (set PAGED_CSRC)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise KernelBuildError("no C++ compiler (c++ or $CXX) on PATH")
    # torch's JIT needs ninja; a venv's ninja is next to its python even when the venv is not activated.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if shutil.which("ninja") is None:
        raise KernelBuildError("ninja is not installed (pip install ninja)")
    from torch.utils import cpp_extension

    if with_cuda:  # torch's JIT compiles .cu files with $CUDA_HOME/bin/nvcc: point it at the toolkit we found
        home = str(find_cuda_home())
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"] = home
    cflags = cpu_flags()
    cuda_flags = ["-O3", "--use_fast_math", *cuda_arch_flags()] if with_cuda else []  # torch adds its -std
    name = "paged_C_cuda" if with_cuda else "paged_C"
    build_dir = CACHE_ROOT / f"{torch.__version__}-{_source_hash([name, *cflags, *cuda_flags])}"
    build_dir.mkdir(parents=True, exist_ok=True)
    sources = [str(p) for p in cpu_sources() + (cuda_sources() if with_cuda else [])]
    log.info("building the %s kernels in %s (first use only)", "CPU+CUDA" if with_cuda else "CPU", build_dir)
    try:
        cpp_extension.load(
            name=name,
            sources=sources,
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_flags,
            extra_ldflags=["-fopenmp"],
            build_directory=str(build_dir),
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # compiler errors arrive as RuntimeError/CalledProcessError with the log attached
        raise KernelBuildError(f"building the kernels failed: {exc}") from exc
    return build_dir / f"{name}.so"


def find_or_build() -> Extension:
    """Load the extension into the process (idempotent per process) and say where it came from."""
    with_cuda = wants_cuda()
    aot = _aot_library()
    if aot is not None:
        try:
            torch.ops.load_library(str(aot))
            return Extension(aot, with_cuda=has_cuda_kernels(), how="aot")
        except OSError as exc:  # built for another torch or platform: the JIT build replaces it
            log.warning("ignoring the ahead-of-time kernels at %s: %s", aot, exc)
    path = _jit_build(with_cuda)
    return Extension(path, with_cuda=has_cuda_kernels(), how="jit")


def has_cuda_kernels() -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key("paged::paged_attention", "CUDA")
