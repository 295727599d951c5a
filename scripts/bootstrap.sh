#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment and installs the project into it.
# The venv lives outside the checkout so a fresh clone reuses the heavy wheels (torch) already installed.
# Source it to get PAGED_PY / PAGED_VENV, or run it directly to only install.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PAGED_CACHE="${PAGED_CACHE:-$HOME/.cache/paged}"
export PAGED_VENV="${PAGED_VENV:-$PAGED_CACHE/venv}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3

if [ ! -x "$PAGED_VENV/bin/python" ]; then
  echo "[bootstrap] creating virtual environment at $PAGED_VENV"
  mkdir -p "$(dirname "$PAGED_VENV")"
  "$python" -m venv "$PAGED_VENV"
  "$PAGED_VENV/bin/pip" install -q --upgrade pip
fi

# Reinstall only when the dependency list changed; otherwise just point the editable install at this checkout.
stamp="$PAGED_VENV/.paged-deps-$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "[bootstrap] installing paged[dev] and its dependencies (first run downloads torch: several minutes)"
  "$PAGED_VENV/bin/pip" install -q -e "$repo[dev]"
  rm -f "$PAGED_VENV"/.paged-deps-* && touch "$stamp"
else
  "$PAGED_VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$repo"
fi
export PAGED_PY="$PAGED_VENV/bin/python"
export PATH="$PAGED_VENV/bin:$PATH"
