"""Processes for router tests: fake replicas (``fake_replica.py``) and ``paged-router`` itself, on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import ServerProcess, free_port, tiny_gemma_dir, wait_ready

__all__ = ["tiny_gemma_dir"]  # re-exported as a fixture for the tests against real engines
FAKE = Path(__file__).with_name("fake_replica.py")
FAKE_MODEL = "fake-model"


Proc = ServerProcess  # any server the tests start on loopback: an engine, a fake replica or the router


def _spawn(command: list[str], port: int, log_dir: Path, ready_path: str, env: dict[str, str] | None = None) -> Proc:
    log_path = log_dir / f"proc-{port}.log"
    environment = {**os.environ, **(env or {})}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=environment)
    return wait_ready(Proc(process, port, log_path), ready_path, 60.0, poll_s=0.1)


def start_fake(log_dir: Path, name: str, port: int | None = None) -> Proc:
    port = port or free_port()
    return _spawn([sys.executable, str(FAKE), str(port), name], port, log_dir, "/ready")


def start_router(log_dir: Path, endpoints: list[str], *extra: str, env: dict[str, str] | None = None) -> Proc:
    port = free_port()
    command = [sys.executable, "-m", "paged_platform.router", "--port", str(port), "--probe-interval", "0.2",
               "--log-level", "info", *(a for url in endpoints for a in ("--endpoint", url)), *extra]  # fmt: skip
    return _spawn(command, port, log_dir, "/health", env=env)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[Proc]]:
    """Every process a test starts, stopped at its end."""
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


@pytest.fixture
def fakes(procs: list[Proc], tmp_path: Path) -> Callable[[int], list[Proc]]:
    def make(n: int) -> list[Proc]:
        new = [start_fake(tmp_path, chr(ord("a") + i)) for i in range(n)]
        procs.extend(new)
        return new

    return make


@pytest.fixture
def router(procs: list[Proc], tmp_path: Path) -> Callable[..., Proc]:
    def make(endpoints: list[str], *extra: str) -> Proc:
        proc = start_router(tmp_path, endpoints, *extra)
        procs.append(proc)
        return proc

    return make


def control(replica: Proc, **settings: object) -> None:
    httpx.post(f"{replica.url}/control", json=settings, timeout=5).raise_for_status()


def seen(replica: Proc) -> dict:
    return httpx.get(f"{replica.url}/control", timeout=5).json()


def replica_states(router: Proc) -> dict[str, dict]:
    return {r["url"]: r for r in httpx.get(f"{router.url}/router/replicas", timeout=5).json()["replicas"]}


def wait_until(predicate: Callable[[], object], timeout: float = 15.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
