"""``paged-engine serve --tensor-parallel-size 2`` (or ``--pipeline-parallel-size 2``): the API server, the engine
core and two worker processes serve what one device serves, show it in ``paged_engine_info``, and a worker's death
ends them all with a non-zero exit that names the rank."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from paged_engine import LLM, SamplingParams

from tests.server.conftest import COMMON_ARGS, MODEL_NAME, engine_info, start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]
PROMPT = "The capital of France is"


def worker_pids(core: int) -> list[int]:
    """The engine core's spawned children that are workers (not multiprocessing's resource tracker)."""
    pids = [int(c) for c in Path(f"/proc/{core}/task/{core}/children").read_text().split()]
    return [pid for pid in pids if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # exited, not yet reaped


@pytest.mark.parametrize("layout", [("2", "1"), ("1", "2")], ids=["tp2", "pp2"])
def test_serves_what_one_device_serves(layout: tuple[str, str], tiny_gemma_dir: Path, tmp_path: Path) -> None:
    import openai

    tp, pp = layout
    tp_server = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, "--tensor-parallel-size", tp,
                             "--pipeline-parallel-size", pp)  # fmt: skip
    try:
        with openai.OpenAI(base_url=f"{tp_server.url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
            got = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0)
        labels = engine_info(tp_server)
    finally:
        assert tp_server.stop() == 0
    one = LLM(str(tiny_gemma_dir), kv_cache_memory="64MiB", max_model_len=1024, num_threads=1)
    expected = one.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0].text
    assert got.choices[0].text == expected
    assert (labels["tensor_parallel_size"], labels["pipeline_parallel_size"]) == layout
    assert (labels["world_size"], labels["collective_backend"]) == ("2", "gloo")


def test_a_dead_worker_ends_the_server_non_zero_leaving_no_process(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, "--tensor-parallel-size", "2")
    try:
        core = server.core_pid()
        workers = worker_pids(core)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)  # while idle: the core checks on its workers every second
        assert server.process.wait(60) != 0
        assert "worker rank 1 was killed by SIGKILL" in server.log()
        deadline = time.monotonic() + 10
        while not all(gone(pid) for pid in (core, *workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(gone(pid) for pid in (core, *workers))
    finally:
        server.stop()
