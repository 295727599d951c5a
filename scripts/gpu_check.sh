#!/usr/bin/env bash
# The GPU check, in one command (about 5 minutes on an H200): builds the CUDA kernels, runs the kernel tests
# against the pure-torch reference on the GPU (including greedy generation on the GPU compared with the CPU
# kernels), then prints the decode kernel's achieved memory bandwidth for batch 1/32/256 at context 1k and 8k.
# CI has no GPU; run this by hand on a machine with one. Uses $PAGED_PY, else python3; the project need not be
# installed (engine/ goes on PYTHONPATH), but its runtime dependencies must be importable.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
py="${PAGED_PY:-python3}"
export PYTHONPATH="$repo/engine${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export PAGED_CUDA_ARCH="${PAGED_CUDA_ARCH:-90}"

"$py" - <<'PY'
import importlib.util
missing = [m for m in ("msgspec", "numpy", "safetensors", "transformers", "pytest", "ninja") if not importlib.util.find_spec(m)]
assert not missing, f"missing Python packages {missing}: pip install them (or carry their wheels) first"
import torch
assert torch.cuda.is_available(), "no GPU visible to torch"
from torch.utils.cpp_extension import CUDA_HOME
assert CUDA_HOME, "no CUDA toolkit found (nvcc on PATH or CUDA_HOME)"
print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, toolkit {CUDA_HOME}")
PY

echo "== building the CPU+CUDA kernels (sm_$PAGED_CUDA_ARCH)"
start=$SECONDS
"$py" -c "
from paged_engine.attention import ops
ext = ops.load()
assert ext.with_cuda, f'the kernels were built without CUDA: {ext}'
print(ext)"
echo "built in $((SECONDS - start)) s"

echo "== kernel tests on the GPU (and the CPU kernels, for comparison)"
"$py" -m pytest -q -x -p no:cacheprovider -o addopts="" tests/kernels/test_cuda_ops.py tests/kernels/test_paged_attention.py

echo "== decode bandwidth"
"$py" benchmarks/bench_attention.py --gpu --peak-gbs 4800 --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16
