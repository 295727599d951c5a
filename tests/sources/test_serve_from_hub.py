"""``paged-engine serve ORG/NAME``: the engine downloads a model from the hub (here the loopback one) and
serves it; a gated model without a token ends the command with the reason, before any port opens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import COMMON_ARGS, start_server, tiny_gemma_dir  # noqa: F401 (a fixture)
from tests.sources.conftest import private_cache
from tests.sources.hub_server import HubServer, HubState, Repo

pytestmark = [pytest.mark.server, pytest.mark.gemma]


def test_serves_a_model_downloaded_from_the_hub(tiny_gemma_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    state = HubState(repos={"acme/tiny-gemma": Repo.from_folder(tiny_gemma_dir)})
    env = {"HF_ENDPOINT": "", "PAGED_CACHE": str(private_cache(tmp_path / "cache")), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}  # fmt: skip
    with HubServer(state) as hub:
        env["HF_ENDPOINT"] = hub.url
        server = start_server("acme/tiny-gemma", tmp_path, *COMMON_ARGS, "--revision", "main", env=env)
        try:
            reply = httpx.post(f"{server.url}/v1/completions", json={"model": "tiny-gemma", "prompt": "Hello",
                               "max_tokens": 4, "temperature": 0}, timeout=60)  # fmt: skip
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] == 4
        finally:
            assert server.stop() == 0
    snapshot = tmp_path / "cache" / "models" / "hub" / "acme--tiny-gemma" / "snapshots" / Repo([]).commit
    assert (snapshot / "model.safetensors").is_file()


def test_serve_refuses_a_gated_model_without_a_token(tmp_path: Path) -> None:
    state = HubState(repos={"acme/gated": Repo({"config.json": b"{}"}, gated_token="secret")})
    with HubServer(state) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "PAGED_CACHE": str(tmp_path / "cache"),
               "HF_HOME": str(tmp_path / "hf")}  # fmt: skip
        env.pop("HF_TOKEN", None)
        done = subprocess.run([sys.executable, "-m", "paged_engine.cli", "serve", "acme/gated", "--port", "1"],
                              capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert "error: ModelGated: acme/gated is a gated model" in done.stderr
    assert "Traceback" not in done.stderr
