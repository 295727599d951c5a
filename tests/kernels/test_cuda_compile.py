"""Every csrc/cuda/*.cu compiles for sm_90 with nvcc against the installed torch headers.

There is no GPU in CI, so this is how the CUDA kernels are kept building. nvcc comes from the CUDA toolkit when
one is installed, else from the `nvidia-cuda-nvcc` wheel the dev extra pins (Linux): not finding it is a failure
naming where it was looked for (a new wheel layout, a missing dependency), never a skip. A successful compile is
remembered by a hash of the sources, flags and compiler, since compiling against torch's headers takes a minute.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paged_engine.kernels import build
from torch.utils import cpp_extension

ARCH = "90"


CUDA_HOME = build.find_cuda_home()
NVCC = None if CUDA_HOME is None else CUDA_HOME / "bin" / "nvcc"
SOURCES = build.cuda_sources()


def nvcc_command(source: Path, output: Path) -> list[str]:
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    return [
        str(NVCC),
        "-c",
        str(source),
        "-o",
        str(output),
        "-std=c++20",
        "-O3",
        "--use_fast_math",
        *build.cuda_arch_flags(ARCH),
        "-Xcompiler",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
        *cpp_extension.COMMON_NVCC_FLAGS,  # what torch's own extension builds pass (the JIT build adds them too)
        "-Werror=all-warnings",
        *includes,
    ]


def compile_key(source: Path) -> str:
    digest = hashlib.sha256(" ".join(nvcc_command(source, Path("out.o"))).encode())
    digest.update(subprocess.run([str(NVCC), "--version"], capture_output=True, text=True).stdout.encode())
    for path in [build.CSRC / "checks.h", *sorted((build.CSRC / "cuda").iterdir())]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def where_nvcc_was_looked_for() -> str:
    try:
        import nvidia

        wheel_roots = [str(Path(root) / "cu*" / "bin" / "nvcc") for root in nvidia.__path__]
    except ImportError:
        wheel_roots = ["(no 'nvidia' package is installed)"]
    return (
        f"torch's CUDA_HOME ({cpp_extension.CUDA_HOME}: $CUDA_HOME, nvcc on PATH, /usr/local/cuda) + /bin/nvcc, and "
        f"the nvidia-cuda-nvcc wheel's {', '.join(wheel_roots)}"
    )


@pytest.fixture(scope="module")
def nvcc() -> Path:
    if sys.platform != "linux":
        pytest.skip(f"the nvidia-cuda-nvcc wheel the dev extra pins is for Linux only, not {sys.platform}")
    assert NVCC is not None, (
        f"nvcc not found: looked for {where_nvcc_was_looked_for()}. The dev extra pins nvidia-cuda-nvcc==13.2.* "
        "(pyproject.toml): is it installed, or did its wheel move nvcc?"
    )
    return NVCC


def test_there_are_cuda_sources() -> None:
    assert SOURCES, f"no .cu files under {build.CSRC / 'cuda'}"


def test_nvcc_is_found(nvcc: Path) -> None:
    """Fast (not ``slow``): a missing nvcc fails here even where the slow compile tests are deselected."""
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    assert "Cuda compilation tools, release" in version, version


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_cu_file_compiles_for_sm90(source: Path, tmp_path: Path, nvcc: Path) -> None:
    stamp = build.CACHE_ROOT / "nvcc-check" / f"{source.stem}-{compile_key(source)}.ok"
    if stamp.exists():
        return
    result = subprocess.run(
        ["nice", *nvcc_command(source, tmp_path / f"{source.stem}.o")],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{NVCC.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert result.returncode == 0, f"nvcc failed on {source.name}:\n{result.stderr[-6000:]}"
    assert (tmp_path / f"{source.stem}.o").stat().st_size > 0
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()
