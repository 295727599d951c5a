"""``paged-engine serve --data-parallel-size 2``: two engine cores behind one API server. Requests are spread over
both, every output equals one core's, both cores' KV usage returns to zero, ``/metrics`` shows each core, and a
budget set through the admin API reaches both."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from paged_engine import LLM, SamplingParams
from paged_engine.server.data_parallel import least_loaded

from tests.server.conftest import (
    ADMIN_TOKEN,
    COMMON_ARGS,
    MODEL_NAME,
    admin,
    engine_info,
    scrape,
    start_server,
    wait_for,
)

PROMPTS = [f"Write {n} words about the sea." for n in range(8)]


def test_least_loaded_takes_the_fewest_in_flight_then_the_lowest_index() -> None:
    assert least_loaded([3, 1, 2]) == 1
    assert least_loaded([2, 2, 5]) == 0
    assert least_loaded([0]) == 0


@pytest.mark.server
@pytest.mark.gemma
def test_two_cores_share_the_load_and_answer_as_one(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, "--data-parallel-size", "2", "--admin-token",
                          ADMIN_TOKEN)  # fmt: skip
    try:
        assert engine_info(server)["data_parallel_size"] == "2"

        def complete(prompt: str) -> str:
            body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
            response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            got = list(pool.map(complete, PROMPTS))
        metrics = scrape(server)
        assert all(metrics[f"paged_core_generation_tokens_total{{engine={i}}}"] > 0 for i in (0, 1))
        assert wait_for(lambda: all(scrape(server)[f"paged_core_kv_cache_usage_ratio{{engine={i}}}"] == 0
                                    for i in (0, 1)))  # fmt: skip

        with admin(server) as client:
            assert client.put("/admin/budgets", json={"max_num_seqs": 8}).status_code == 200
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(complete, PROMPTS[:4]))
        metrics = scrape(server)
        assert [metrics[f"paged_core_scheduler_max_num_seqs{{engine={i}}}"] for i in (0, 1)] == [8, 8]
    finally:
        assert server.stop() == 0
    one = LLM(str(tiny_gemma_dir), kv_cache_memory="64MiB", max_model_len=1024, num_threads=1)
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    assert got == [o.outputs[0].text for o in one.generate(PROMPTS, greedy)]


def test_llm_refuses_data_parallelism() -> None:
    with pytest.raises(ValueError, match="data_parallel_size is for `paged-engine serve`"):
        LLM("/nonexistent", data_parallel_size=2)  # refused before the model is looked for
