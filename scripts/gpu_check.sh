#!/usr/bin/env bash
# The GPU check: one run of about 6 minutes on one H200, leaving room for a second in a 15-minute slot.
#   scripts/gpu_check.sh OUT_DIR [WHEELS_DIR]
# Stages, each in its own process with its own time limit; a failed or timed-out stage never skips the next:
#   00 preflight   every import checked first; what is missing is installed from WHEELS_DIR (default .gpu-wheels,
#                  built by scripts/gpu_check/wheels.sh), never from the network
#   01 build       the CPU+CUDA kernels for sm_$PAGED_CUDA_ARCH (default 90)
#   02 cuda-ops    kernels, FlashAttention 4, graph replay and no-host-sync tests against the reference
#   03 greedy      GPU fp32 greedy tokens == CPU's, Gemma 3 270M's config (random weights), prompts past the window
#   04 bf16        bf16 on the GPU vs transformers bf16 on the GPU: teacher-forced top-1 agreement >= 99 %
#   05 bandwidth   decode kernel GB/s against the device-to-device copy rate (Gemma and Llama-8B shapes)
#   06 throughput  W1-like offline batch, eager vs CUDA graphs, and peak GPU memory (07, in the table)
# Everything goes under OUT_DIR: a log and a JSON result per stage, then summary.md (also printed).
# Made for a bare GPU machine (Python 3.12, torch with CUDA, transformers, triton); uses $PAGED_PY, else python3.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:?usage: scripts/gpu_check.sh OUT_DIR [WHEELS_DIR]}" && cd "$1" && pwd)"
wheels="${2:-$repo/.gpu-wheels}"
py="${PAGED_PY:-python3}"
cd "$repo"
export PYTHONPATH="$repo/engine:$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PAGED_CUDA_ARCH="${PAGED_CUDA_ARCH:-90}"
: > "$out/stages.tsv"

stage() {  # stage NAME SECONDS SCRIPT [ARGS...]
  local name=$1 limit=$2 script=$3 start=$SECONDS rc
  shift 3
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$py" "scripts/gpu_check/$script" --out "$out" "$@" > "$out/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >> "$out/stages.tsv"
  tail -n 3 "$out/$name.log"
}

stage 00-preflight 60 preflight.py --wheels "$wheels"
stage 01-build 150 build.py
stage 02-cuda-ops 75 ops_tests.py
stage 03-greedy 75 greedy.py
stage 04-bf16-quality 35 quality.py
stage 05-bandwidth 35 bandwidth.py
stage 06-throughput 80 throughput.py
"$py" scripts/gpu_check/summary.py "$out" | tee "$out/summary.md"
