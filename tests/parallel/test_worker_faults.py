"""A worker that dies, hangs or fails to start ends the engine cleanly: an error naming the rank and what
happened, and no worker process left behind."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from paged_engine import LLM, SamplingParams
from paged_engine.executor.multiproc import WorkerError
from paged_engine.parallel.layout import ShardingError

from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import BLOCK_SIZE, save_tiny_model, save_tiny_tokenizer

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = save_tiny_model("llama", tmp_path_factory.mktemp("llama"))
    save_tiny_tokenizer(folder)
    return folder


def start(folder, **kwargs) -> LLM:
    settings = dict(tensor_parallel_size=2, block_size=BLOCK_SIZE, num_kv_blocks=64, max_model_len=64, num_threads=1)
    return LLM(str(folder), **{**settings, **kwargs})


def step_once(llm: LLM) -> None:
    llm.engine.add_request("r", prompts()[0], GREEDY)
    llm.engine.step()


def assert_no_worker_left(llm: LLM) -> None:
    workers = llm.engine.core.executor.workers
    assert workers and not any(p.is_alive() for p in workers)


def test_a_killed_worker_ends_the_engine_naming_its_rank(folder):
    llm = start(folder)
    step_once(llm)
    os.kill(llm.engine.core.executor.workers[1].pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="worker rank 1 was killed by SIGKILL"):
        while llm.engine.has_unfinished_requests():
            llm.engine.step()
    assert_no_worker_left(llm)


def test_a_hung_worker_ends_the_engine_after_the_step_timeout(folder):
    llm = start(folder, worker_step_timeout=2.0)
    step_once(llm)
    os.kill(llm.engine.core.executor.workers[1].pid, signal.SIGSTOP)  # alive, but never answers again
    with pytest.raises(WorkerError, match=r"within 2 s; rank\(s\) \[1\] never took the step"):
        llm.engine.step()
    assert_no_worker_left(llm)


def test_a_worker_that_fails_to_start_names_its_rank_and_error(folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short: every rank fails to read it
    with pytest.raises(WorkerError, match=r"worker rank [01] failed during start-up: SafetensorError: .*header"):
        start(broken)


def test_a_size_the_model_cannot_be_cut_by_is_refused_before_any_worker_starts(folder):
    with pytest.raises(ShardingError, match="tensor-parallel size 3 cannot split a model with 4 attention heads"):
        start(folder, tensor_parallel_size=3)
