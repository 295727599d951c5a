"""Tensor parallelism across two hosts on loopback: host 0 runs the API server, the engine core and rank 0; host 1
runs ``paged-engine serve --headless --node-rank 1``, only rank 1. They serve the completion one host serves, and
stopping host 0 stops host 1 cleanly."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from paged_engine import LLM, SamplingParams

from tests.server.conftest import COMMON_ARGS, MODEL_NAME, free_port, start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]
PROMPT = "The capital of France is"


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on loopback now."""
    while True:
        first = free_port()
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return first


def test_two_hosts_serve_what_one_host_serves(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    import openai

    port = free_ports(3)  # the store; the engine core also listens on the next two
    hosts = ("--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port))
    command = [sys.executable, "-m", "paged_engine.cli", "serve", str(tiny_gemma_dir), *COMMON_ARGS, *hosts,
               "--node-rank", "1", "--headless"]  # fmt: skip
    with (tmp_path / "host1.log").open("wb") as log:
        host1 = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        host0 = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, *hosts, "--node-rank", "0")
        try:
            with openai.OpenAI(base_url=f"{host0.url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
                got = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0)
        finally:
            assert host0.stop() == 0
        assert host1.wait(30) == 0, (tmp_path / "host1.log").read_text()
    finally:
        if host1.poll() is None:
            host1.kill()
    one = LLM(str(tiny_gemma_dir), kv_cache_memory="64MiB", max_model_len=1024, num_threads=1)
    expected = one.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0].text
    assert got.choices[0].text == expected


def test_headless_needs_a_host_other_than_the_first(tiny_gemma_dir: Path) -> None:
    command = [sys.executable, "-m", "paged_engine.cli", "serve", str(tiny_gemma_dir), "--headless",
               "--tensor-parallel-size", "2"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "--headless runs the ranks of a host other than the first" in result.stderr
