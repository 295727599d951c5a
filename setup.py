"""Optional ahead-of-time build of the kernels in csrc/ as ``paged_engine._C``.

Metadata lives in pyproject.toml; this file only adds the extension, and only when asked:

    PAGED_BUILD_KERNELS=1 pip install --no-build-isolation -e .

(``--no-build-isolation`` so the build uses the installed torch instead of downloading another one.) Without the
variable nothing is compiled here and the kernels are JIT-built on first use (paged_engine/kernels/build.py).
The extension is optional: if it fails to compile, the install still succeeds and the engine falls back to the
JIT build, or to the torch reference backend where no compiler exists, logging why. The CUDA kernels are added
where torch has CUDA and a toolkit is found; PAGED_CUDA_ARCH picks the GPU architectures (default 90).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def _kernel_extensions() -> dict:
    if os.environ.get("PAGED_BUILD_KERNELS") != "1":
        return {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
    except ImportError:
        print("[paged] PAGED_BUILD_KERNELS=1 but torch is not importable here (use --no-build-isolation); "
              "the kernels will be JIT-built on first use")  # fmt: skip
        return {}
    spec = importlib.util.spec_from_file_location("_paged_build", ROOT / "engine/paged_engine/kernels/build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # dataclasses look their module up while the file executes
    spec.loader.exec_module(build)
    sources = [str(p.relative_to(ROOT)) for p in build.cpu_sources()]
    flags = {"cxx": build.cpu_flags()}
    with_cuda = bool(torch.version.cuda) and CUDA_HOME is not None
    if with_cuda:
        sources += [str(p.relative_to(ROOT)) for p in build.cuda_sources()]
        flags["nvcc"] = ["-O3", "--use_fast_math", *build.cuda_arch_flags()]
    cls = CUDAExtension if with_cuda else CppExtension
    print(f"[paged] building the {'CPU+CUDA' if with_cuda else 'CPU'} kernels ahead of time as paged_engine._C")
    ext = cls("paged_engine._C", sources, extra_compile_args=flags, extra_link_args=["-fopenmp"], optional=True)
    return {"ext_modules": [ext], "cmdclass": {"build_ext": BuildExtension}}


setup(**_kernel_extensions())
