"""The container images do what a pod needs of them: the engine serves from a read-only root filesystem as a
non-root user with its kernels built ahead of time, the default model is baked in, and the operator runs without
torch. Each runs the real image through docker or podman; ports are published on 127.0.0.1 only."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.images.conftest import Images, chart_image_names, container, free_port, labels

pytestmark = [pytest.mark.node, pytest.mark.slow, pytest.mark.gemma]

ENGINE_UID = "65532"
OCI = "org.opencontainers.image."


def test_build_names_the_images_the_chart_and_operator_default_to(images: Images):
    assert (images.engine, images.operator) == chart_image_names()


@pytest.mark.parametrize("which", ["engine", "operator"])
def test_images_carry_oci_labels(images: Images, which: str):
    found = labels(getattr(images, which))
    assert found[f"{OCI}version"] == images.engine.rsplit(":", 1)[1]
    assert found[f"{OCI}source"].startswith("https://")
    assert found[f"{OCI}revision"] not in ("", "unknown")
    assert found[f"{OCI}title"] == f"paged-{which}"


def test_engine_image_is_non_root_without_a_compiler(images: Images):
    script = "id -u; for c in c++ g++ gcc cc nvcc; do command -v $c || true; done"
    out = container("run", "--rm", "--entrypoint", "sh", images.engine, "-c", script).stdout.split()
    assert out == [ENGINE_UID], f"expected uid {ENGINE_UID} and no compiler, got {out}"


def test_engine_image_resolves_the_default_model_baked_in(images: Images):
    code = "from paged_engine.loader.default_model import resolve_model; print(resolve_model(None))"
    out = container("run", "--rm", "--read-only", "--entrypoint", "python", images.engine, "-c", code).stdout
    model = out.strip().splitlines()[-1]
    assert model == "/opt/paged/models/gemma-3-270m"
    files = container("run", "--rm", "--entrypoint", "ls", images.engine, model).stdout.split()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)


def test_engine_image_serves_read_only_as_non_root(
    images: Images, tiny_gemma_dir: Path, tmp_path: Path, container_name: str
):
    model = tmp_path / "tiny-gemma"
    shutil.copytree(tiny_gemma_dir, model)
    for path in [model, *model.iterdir()]:  # readable by the image's user; pytest's folders are private to root
        path.chmod(0o755 if path.is_dir() else 0o644)
    port = free_port()
    container(
        "run", "-d", "--name", container_name, "--read-only",
        "--tmpfs", "/tmp:rw,mode=1777", "--tmpfs", "/var/cache/paged:rw,mode=1777",
        "-v", f"{model}:/models/tiny:ro", "-p", f"127.0.0.1:{port}:8000", "-e", "OMP_NUM_THREADS=1",
        images.engine,
        "serve", "/models/tiny", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "tiny",
        "--attention-backend", "cpu", "--kv-cache-memory", "64MiB", "--max-model-len", "1024",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        state = container("inspect", "--format", "{{.State.Running}}", container_name, check=False).stdout.strip()
        assert state == "true", f"engine container stopped:\n{logs(container_name)}"
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"engine not ready in 180 s:\n{logs(container_name)}"
        time.sleep(0.5)
    body = {"model": "tiny", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["usage"]["completion_tokens"] == 4
    assert isinstance(completion["choices"][0]["text"], str)
    uid = container("exec", container_name, "python", "-c", "import os; print(os.getuid())").stdout.strip()
    assert uid == ENGINE_UID
    log = logs(container_name)
    assert "(aot build" in log, f"the kernels did not load ahead of time:\n{log}"


def test_operator_image_prints_help_without_torch(images: Images):
    result = container("run", "--rm", "--read-only", images.operator, "--help")
    assert "run" in result.stdout
    code = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
    container("run", "--rm", "--read-only", "--entrypoint", "python", images.operator, "-c", code)
    uid = container("run", "--rm", "--entrypoint", "id", images.operator, "-u").stdout.strip()
    assert uid == ENGINE_UID


def logs(name: str) -> str:
    result = container("logs", name, check=False)
    return (result.stdout + result.stderr)[-8000:]
