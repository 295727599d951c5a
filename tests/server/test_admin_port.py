"""``--admin-port``: the admin API on its own port (kept out of the Service), absent from the public one; the API
key read from ``PAGED_API_KEY`` (how a pod gets it from a Secret)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from paged_engine.core.scheduler_config import CPU_SERVING_MAX_NUM_BATCHED_TOKENS

from tests.server.conftest import ADMIN_TOKEN, API_KEY, COMMON_ARGS, ServerProcess, free_port, start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]


@pytest.fixture(scope="module")
def split(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    admin_port = free_port()
    env = {"PAGED_API_KEY": API_KEY, "PAGED_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = start_server(tiny_gemma_dir, tmp_path_factory.mktemp("logs"), *COMMON_ARGS, "--admin-port",
                        str(admin_port), env=env)  # fmt: skip
    yield proc, admin_port
    assert proc.stop() == 0


def test_admin_lives_on_its_own_port_only(split: tuple[ServerProcess, int]) -> None:
    server, admin_port = split
    token = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert httpx.get(f"{server.url}/admin/budgets", headers=token, timeout=10).status_code == 404
    admin = f"http://127.0.0.1:{admin_port}"
    assert httpx.get(f"{admin}/admin/budgets", timeout=10).status_code == 401
    budgets = httpx.get(f"{admin}/admin/budgets", headers=token, timeout=10)
    assert budgets.status_code == 200 and budgets.json()["max_num_seqs"] >= 1
    # no --max-num-batched-tokens given: a server on a CPU takes the CPU-serving default
    assert budgets.json()["max_num_batched_tokens"] == CPU_SERVING_MAX_NUM_BATCHED_TOKENS
    assert httpx.get(f"{admin}/v1/models", timeout=10).status_code == 404
    assert httpx.get(f"{admin}/admin/drain", headers=token, timeout=10).json()["draining"] is False


def test_api_key_comes_from_the_environment(split: tuple[ServerProcess, int]) -> None:
    server, _ = split
    assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 401
    ok = httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert ok.status_code == 200
    assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 200
