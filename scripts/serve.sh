#!/usr/bin/env bash
# Sets everything up on a fresh machine and serves the default model (Gemma 3 270M) on http://127.0.0.1:8000.
# Extra arguments go to `paged-engine serve` (e.g. --port 9000, or a model path first).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/bootstrap.sh"
exec paged-engine serve "$@"
