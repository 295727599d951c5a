#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the whole test suite (unit, model, server, Kubernetes).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source scripts/bootstrap.sh
ruff check .
ruff format --check .
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that must never count as a pass.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
