"""Parallel sampling (fork with copy-on-write) and sliding-window groups through the scheduler."""

from __future__ import annotations

import pytest
from paged_engine.core import FinishReason, RequestValidationError

from tests.core.helpers import FakeRunner, make_scheduler, new_request, run_until_done, step

BS = 4


def test_parent_prefills_once_then_children_share_blocks_and_copy_on_first_write():
    scheduler = make_scheduler(block_size=BS, max_num_seqs=3)
    runner = FakeRunner(scheduler.kv.config, seed=3)
    scheduler.add_request(new_request("p", list(range(10)), max_tokens=5, params={"n": 3}))
    out, result = step(scheduler, runner)
    assert out.num_scheduled_tokens == {"p": 9}  # all but the last prompt token
    assert result.outputs == []
    assert [r.request_id for r in scheduler.running] == ["p-0", "p-1", "p-2"]
    shared = scheduler.kv.get_block_ids("p-0")
    assert scheduler.kv.get_block_ids("p-1") == scheduler.kv.get_block_ids("p-2") == shared
    assert scheduler.kv.pool.num_used_blocks == 3  # the prompt's blocks, once

    out, result = step(scheduler, runner)
    assert out.finished_req_ids == {"p"}  # the runner drops the parent
    assert out.num_scheduled_tokens == {"p-0": 1, "p-1": 1, "p-2": 1}
    # Token 9 goes into the shared partial block: the first two children copy it, the last writes in place.
    assert len(out.copy_on_write) == 2
    assert {src for src, _ in out.copy_on_write} == {shared[0][2]}
    assert [o.req_id for o in result.outputs] == ["p-0", "p-1", "p-2"]
    assert all(o.parent_req_id == "p" for o in result.outputs) and [o.index for o in result.outputs] == [0, 1, 2]
    assert scheduler.kv.pool.num_used_blocks == 5  # 2 shared full blocks + 3 private last blocks

    outputs = run_until_done(scheduler, runner)
    assert sorted(o.req_id for o in outputs if o.finished) == ["p-0", "p-1", "p-2"]
    assert scheduler.kv.usage == 0.0


def test_parent_counts_as_n_running_requests():
    scheduler = make_scheduler(block_size=BS, max_num_seqs=3)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("p", list(range(6)), params={"n": 2}))
    scheduler.add_request(new_request("a", [1, 2, 3]))
    scheduler.add_request(new_request("b", [4, 5, 6]))
    out, _ = step(scheduler, runner)
    assert set(out.num_scheduled_tokens) == {"p", "a"}  # p holds two seats, a the third
    run_until_done(scheduler, runner)


def test_abort_parent_id_aborts_children():
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("p", list(range(6)), max_tokens=8, params={"n": 2}))
    step(scheduler, runner)
    step(scheduler, runner)
    outputs = scheduler.abort(["p"])
    assert sorted(o.req_id for o in outputs) == ["p-0", "p-1"]
    assert all(o.finish_reason is FinishReason.ABORT for o in outputs)
    step(scheduler, runner)
    assert scheduler.kv.usage == 0.0 and not runner.states


def test_child_ids_are_reserved_until_the_fork():
    scheduler = make_scheduler(block_size=BS)
    scheduler.add_request(new_request("p", list(range(6)), params={"n": 2}))
    for clash in ("p-0", "p-1"):
        with pytest.raises(RequestValidationError, match=f"request id '{clash}' is already in use"):
            scheduler.add_request(new_request(clash, [1]))
    scheduler.add_request(new_request("q-1", [1]))
    with pytest.raises(RequestValidationError, match="child ids of 'q'"):
        scheduler.add_request(new_request("q", [1], params={"n": 2}))


def test_single_token_prompt_with_n_starts_independent_children():
    scheduler = make_scheduler(block_size=BS, max_num_seqs=4)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("p", [5], max_tokens=2, params={"n": 2, "seed": 10}))
    assert sorted(scheduler.requests) == ["p-0", "p-1"]
    assert [scheduler.requests[f"p-{i}"].sampling_params.seed for i in range(2)] == [10, 11]
    outputs = run_until_done(scheduler, runner)
    assert sorted(o.req_id for o in outputs if o.finished) == ["p-0", "p-1"]


def test_sliding_window_request_holds_far_fewer_blocks_than_full_attention():
    prompt = [i % 97 for i in range(200)]
    held = {}
    for name, windows in (("full", (None,)), ("window", (16,))):
        scheduler = make_scheduler(
            num_blocks=80, block_size=BS, windows=windows, max_model_len=300, max_num_batched_tokens=32
        )
        runner = FakeRunner(scheduler.kv.config)
        scheduler.add_request(new_request("r", prompt, max_tokens=60))
        peak = 0
        while scheduler.has_unfinished_requests():
            step(scheduler, runner)
            peak = max(peak, scheduler.kv.pool.num_used_blocks)
        held[name] = peak
        assert scheduler.kv.usage == 0.0
    assert held["full"] == 65  # ceil(259 / 4): every computed token
    # Window 16 plus a 32-token chunk: at most ceil((15 + 32) / 4) + 1 blocks.
    assert held["window"] <= 13


def test_hybrid_groups_serve_prefix_hits_valid_for_every_group():
    scheduler = make_scheduler(num_blocks=200, block_size=BS, windows=(None, 8), max_model_len=120)
    runner = FakeRunner(scheduler.kv.config)
    prompt = [i % 31 for i in range(60)]
    scheduler.add_request(new_request("a", prompt, max_tokens=2))
    run_until_done(scheduler, runner)
    scheduler.add_request(new_request("b", [*prompt, 1, 2, 3], max_tokens=2))
    out, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == 60
    full_ids, window_ids = out.new_requests[0].block_ids
    assert 0 not in full_ids
    assert window_ids[:13] == [0] * 13 and 0 not in window_ids[13:]  # only tokens 53.. are attended to
    run_until_done(scheduler, runner)  # the fake runner checks every attended token's KV
    assert scheduler.kv.usage == 0.0


def test_requests_are_validated_against_their_sliding_window_footprint():
    settings = {"num_blocks": 100, "block_size": BS, "max_model_len": 400, "max_num_batched_tokens": 32}
    prompt = [i % 89 for i in range(290)]
    two_full = make_scheduler(windows=(None, None), **settings)
    with pytest.raises(RequestValidationError, match="needs up to 150 KV blocks"):
        two_full.add_request(new_request("r", prompt, max_tokens=11))
    # Full group: 75 blocks; window group: its window plus one chunk, ceil((15 + 32) / 4) + 1 = 13 blocks.
    hybrid = make_scheduler(windows=(None, 16), **settings)
    hybrid.add_request(new_request("r", prompt, max_tokens=11))
    run_until_done(hybrid, FakeRunner(hybrid.kv.config))
    assert hybrid.kv.usage == 0.0


def test_a_lone_request_shrinks_a_chunk_larger_than_the_pool_instead_of_retrying_forever():
    # Validated with an 8-token chunk bound: window 8 needs ceil((7 + 8) / 4) + 1 = 5 blocks; the pool has 5.
    scheduler = make_scheduler(num_blocks=6, block_size=BS, windows=(8,), max_model_len=200, max_num_batched_tokens=8)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("r", [i % 13 for i in range(100)], max_tokens=4))
    scheduler.update_budgets(max_num_batched_tokens=100)  # a 100-token chunk would need 25 blocks
    out, _ = step(scheduler, runner)
    assert out.num_scheduled_tokens == {"r": 20}  # the largest chunk the 5 blocks hold
    outputs = run_until_done(scheduler, runner, max_steps=50)
    assert [o.finish_reason for o in outputs if o.finished] == [FinishReason.LENGTH]
