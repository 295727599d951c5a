"""Render a Helm chart with the real helm binary, for tests that use a chart's objects (its RBAC, its CRDs)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def render_chart(
    helm: Path,
    chart: Path,
    release: str,
    namespace: str,
    *,
    values_files: Sequence[Path] = (),
    set_values: Mapping[str, str] | None = None,
    api_versions: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """``helm template`` the chart into a list of objects (empty documents dropped); a render error raises with
    helm's own message."""
    argv = [str(helm), "template", release, str(chart), "--namespace", namespace, "--include-crds"]
    for values in values_files:
        argv += ["--values", str(values)]
    for key, value in (set_values or {}).items():
        argv += ["--set", f"{key}={value}"]
    for api in api_versions:  # what a cluster would serve (``.Capabilities.APIVersions``)
        argv += ["--api-versions", api]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm template {chart} failed ({result.returncode}): {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
