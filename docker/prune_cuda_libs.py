"""Deletes from torch's CUDA wheels what a CPU-only engine never loads (engine-cpu built on the CUDA torch wheel).

libtorch links against the CUDA libraries, so those the dynamic linker must resolve to load torch's libraries
(their DT_NEEDED closure; the paged kernels link against torch's alone) stay, although a CPU process never
initialises them. Everything else under ``site-packages/nvidia`` goes: the libraries only ``dlopen``ed on a GPU
(cuDNN's engines, cuSOLVERMg, the profiler's), headers, static libraries, device bitcode and tools. The image's
build runs ``import torch`` and loads the kernels afterwards, so a library wrongly deleted fails the build, not a
pod. Does nothing without the CUDA wheels.

Usage: ``python prune_cuda_libs.py SITE_PACKAGES`` (needs ``readelf``, from binutils).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[(.+?)\]")


def needed(library: Path) -> list[str]:
    out = subprocess.run(["readelf", "--dynamic", str(library)], capture_output=True, text=True, check=True).stdout
    return NEEDED.findall(out)


def linked_closure(roots: list[Path], candidates: dict[str, Path]) -> set[Path]:
    """The candidates reachable from ``roots`` through DT_NEEDED entries (matched by file name = soname)."""
    kept: set[Path] = set()
    stack = list(roots)
    while stack:
        for name in needed(stack.pop()):
            library = candidates.get(name)
            if library is not None and library not in kept:
                kept.add(library)
                stack.append(library)
    return kept


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: prune_cuda_libs.py SITE_PACKAGES")
    site = Path(sys.argv[1]).resolve()
    nvidia = site / "nvidia"
    if not nvidia.is_dir():
        print("no CUDA wheels installed: nothing to prune")
        return
    roots = [p for p in (site / "torch" / "lib").glob("*.so*") if p.is_file()]
    candidates = {p.name: p for p in nvidia.rglob("*.so*") if p.is_file()}
    kept = linked_closure(roots, candidates)
    kept |= {p.resolve() for p in kept}  # a kept symlink keeps its target
    before = sum(p.stat().st_size for p in nvidia.rglob("*") if p.is_file())
    for path in sorted(nvidia.rglob("*"), reverse=True):  # children before their folders
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        elif path not in kept and path.suffix != ".py":
            path.unlink()
    after = sum(p.stat().st_size for p in nvidia.rglob("*") if p.is_file())
    names = ", ".join(sorted({p.name for p in kept}))
    print(f"CUDA wheels pruned from {before / 1e6:.0f} MB to {after / 1e6:.0f} MB; kept {names}")


if __name__ == "__main__":
    main()
