#!/usr/bin/env bash
# Builds the folder of wheels scripts/gpu_check.sh installs from on a bare GPU machine (no package index there):
# the engine's server-side dependencies and the test tools, for CPython 3.12 on x86-64 Linux (about 15 MB).
#   scripts/gpu_check/wheels.sh [DIR]     # default .gpu-wheels (git-ignored), then: carry it with the repo
# FlashAttention 4 (the gpu extra) is not included: its CUDA libraries are ~100 MB. Add them with
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d DIR 'flash-attn-4[cu13]==4.0.0b36'
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-$repo/.gpu-wheels}"
mkdir -p "$dir"
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$dir" msgspec pyzmq fastapi uvicorn prometheus-client opentelemetry-sdk httpx pyyaml ninja pytest
du -sh "$dir"
