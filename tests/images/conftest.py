"""The container images, built once per session by scripts/build_images.sh (seconds when nothing changed), and
helpers to run them through scripts/container.sh (docker or podman, with this machine's flags)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.server.conftest import free_port, tiny_gemma_dir

__all__ = ["Images", "container", "free_port", "images", "tiny_gemma_dir"]

REPO = Path(__file__).resolve().parents[2]
CONTAINER = REPO / "scripts" / "container.sh"
BUILD_TIMEOUT_S = 3600  # a cold build downloads torch and its CUDA libraries (several GB); warm ones take seconds


def container(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``scripts/container.sh ARGS`` (docker or podman with this machine's flags), output captured."""
    result = subprocess.run([str(CONTAINER), *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"container {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def labels(image: str) -> dict[str, str]:
    return json.loads(container("image", "inspect", "--format", "{{ json .Config.Labels }}", image).stdout)


@dataclass(frozen=True)
class Images:
    engine: str
    operator: str
    build_log: str


def chart_image_names() -> tuple[str, str]:
    """(engine, operator) as the chart and the operator's defaults name them: what the build must produce."""
    from paged_platform.api.spec import DEFAULT_ENGINE_IMAGE

    chart = yaml.safe_load((REPO / "charts/paged/Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts/paged/values.yaml").read_text())
    tag = values["image"]["tag"] or chart["appVersion"]
    return DEFAULT_ENGINE_IMAGE, f"{values['image']['repository']}:{tag}"


@pytest.fixture(scope="session")
def images() -> Images:
    result = subprocess.run(
        [str(REPO / "scripts" / "build_images.sh"), "engine", "operator"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=REPO,
    )  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"scripts/build_images.sh failed:\n{log[-20000:]}"
    built = dict(re.findall(r"^\[images\] (engine|operator) +(\S+) +\d+ MB", log, re.MULTILINE))
    return Images(engine=built["engine"], operator=built["operator"], build_log=log)


@pytest.fixture
def container_name() -> Iterator[str]:
    """A unique container name; the container is removed afterwards, whatever the test did."""
    name = f"paged-test-{uuid.uuid4().hex[:12]}"
    yield name
    container("rm", "-f", name, check=False)
