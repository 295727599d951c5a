"""A failure in one request's own part of a step fails that request only; the rest of the batch is served as if
it were alone, its blocks are freed, and the engine keeps serving. A failure in shared work stays fatal."""

from __future__ import annotations

import pytest
from paged_engine import SamplingParams
from paged_engine.worker import model_runner
from paged_engine.worker.input_batch import InputBatch

from tests.model.test_engine import GREEDY, make_llm, token_ids
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import save_tiny_model, save_tiny_tokenizer

FAULT_SEED = 0xFA17


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = save_tiny_model("llama", tmp_path_factory.mktemp("llama"))
    save_tiny_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def expected(folder) -> list[list[int]]:
    return token_ids(make_llm(folder).generate(prompts()[:3], GREEDY))


def fail_adding(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    """Adding a request whose id starts with ``prefix`` to the persistent batch raises."""
    add = InputBatch.add_request

    def add_or_fail(self: InputBatch, new, *args):  # type: ignore[no-untyped-def]
        if new.req_id.startswith(prefix):
            raise RuntimeError("injected fault while adding the request")
        return add(self, new, *args)

    monkeypatch.setattr(InputBatch, "add_request", add_or_fail)


def fail_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building sampling metadata for a batch that holds a row seeded with FAULT_SEED raises."""
    build = model_runner.SamplingMetadata.build

    def build_or_fail(rows, *args, **kwargs):  # type: ignore[no-untyped-def]
        if any(row.params.seed == FAULT_SEED for row in rows):
            raise ValueError("injected fault while sampling")
        return build(rows, *args, **kwargs)

    monkeypatch.setattr(model_runner.SamplingMetadata, "build", build_or_fail)


def run_batch(llm, faulty: SamplingParams):
    """Two healthy greedy requests around a faulty one, all in the same steps."""
    engine = llm.engine
    engine.add_request("ok-0", prompts()[0], GREEDY)
    engine.add_request("bad", prompts()[1], faulty)
    engine.add_request("ok-2", prompts()[2], GREEDY)
    done = {}
    while engine.has_unfinished_requests():
        done.update((o.request_id, o) for o in engine.step())
    return done


def assert_isolated(llm, done, expected, num_samples: int = 1) -> None:
    assert done["ok-0"].outputs[0].token_ids == expected[0]
    assert done["ok-2"].outputs[0].token_ids == expected[2]
    bad = done["bad"].outputs
    assert len(bad) == num_samples
    assert all(o.finish_reason == "error" and "injected fault" in o.error for o in bad)
    scheduler = llm.engine.core.scheduler
    assert not scheduler.has_unfinished_requests() and scheduler.kv.usage == 0.0
    # ...and the engine keeps serving, the same tokens as before.
    assert token_ids(llm.generate(prompts()[:3], GREEDY)) == expected


def test_a_request_that_fails_while_being_prepared_fails_alone(folder, expected, monkeypatch):
    llm = make_llm(folder)
    fail_adding(monkeypatch, "bad")
    assert_isolated(llm, run_batch(llm, GREEDY), expected)


def test_a_parallel_sampling_request_fails_as_a_whole(folder, expected, monkeypatch):
    llm = make_llm(folder)
    fail_adding(monkeypatch, "bad")  # the fork parent: none of its samples ever runs
    n2 = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=8)
    assert_isolated(llm, run_batch(llm, n2), expected, num_samples=2)


def test_a_request_that_fails_while_sampling_fails_alone(folder, expected, monkeypatch):
    llm = make_llm(folder)
    fail_sampling(monkeypatch)
    faulty = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, seed=FAULT_SEED)
    assert_isolated(llm, run_batch(llm, faulty), expected)


def test_a_failure_in_shared_work_is_still_fatal(folder, monkeypatch):
    llm = make_llm(folder)

    def broken_forward(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("injected fault in the forward pass")

    monkeypatch.setattr(llm.engine.core.runner.model, "forward", broken_forward)
    with pytest.raises(RuntimeError, match="forward pass"):
        llm.generate(prompts()[:2], GREEDY)
