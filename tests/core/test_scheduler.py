from __future__ import annotations

import pytest
from paged_engine.core import FinishReason, RequestStatus, RequestValidationError, SettingError
from paged_engine.core.scheduler_output import ModelRunnerOutput

from tests.core.helpers import FakeRunner, make_scheduler, new_request, run_until_done, step

BS = 4


def test_shared_full_blocks_hit_exactly():
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(14))))
    run_until_done(scheduler, runner)
    k = 3  # 12 shared tokens, then divergence inside the fourth block
    scheduler.add_request(new_request("b", [*range(12), 99, 98, 97, 96, 95]))
    _, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == k * BS
    assert result.stats.prefix_cache_queries == 17
    assert scheduler.get_request("b").num_cached_tokens == k * BS


@pytest.mark.parametrize("length", [8, 9, 11, 12, 13])
def test_identical_repeat_hits_all_but_the_last_token_rounded_down(length):
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(length))))
    run_until_done(scheduler, runner)
    scheduler.add_request(new_request("b", list(range(length))))
    out, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == (length - 1) // BS * BS
    assert out.num_scheduled_tokens["b"] == length - (length - 1) // BS * BS
    assert out.new_requests[0].num_computed_tokens == (length - 1) // BS * BS


def test_prompt_logprobs_request_computes_the_whole_prompt():
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(13))))
    run_until_done(scheduler, runner)
    scheduler.add_request(new_request("b", list(range(13)), params={"prompt_logprobs": 1}))
    out, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == 0
    assert out.new_requests[0].num_computed_tokens == 0
    assert out.num_scheduled_tokens["b"] == 13


@pytest.mark.parametrize(
    ("salt_a", "salt_b", "caching", "hit"),
    [("x", "y", True, 0), (None, "y", True, 0), ("x", "x", True, 8), (None, None, False, 0)],
)
def test_salt_and_disabled_caching_prevent_hits(salt_a, salt_b, caching, hit):
    scheduler = make_scheduler(block_size=BS, enable_prefix_caching=caching)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(10)), cache_salt=salt_a))
    run_until_done(scheduler, runner)
    scheduler.add_request(new_request("b", list(range(10)), cache_salt=salt_b))
    _, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == hit
    assert result.stats.prefix_cache_queries == (10 if caching else 0)


def test_most_recently_used_prefix_survives_eviction_pressure():
    # 12 usable blocks; each prompt fills 3 blocks and max_tokens=1 adds none.
    scheduler = make_scheduler(num_blocks=13, block_size=BS, max_num_seqs=1)
    runner = FakeRunner(scheduler.kv.config)
    prompts = {name: [base + i for i in range(12)] for name, base in (("a", 100), ("b", 200), ("c", 300))}
    for name in ("a", "b", "c", "a"):  # a is used again last: most recently used
        scheduler.add_request(new_request(name, prompts[name], max_tokens=1))
        run_until_done(scheduler, runner)
    # Pressure: 7 fresh blocks. The 3 uncached free blocks go first, then cached ones in LRU order.
    scheduler.add_request(new_request("big", [900 + i for i in range(28)], max_tokens=1))
    run_until_done(scheduler, runner)

    def cached_tokens(name: str) -> int:
        probe = new_request("probe", prompts[name])
        probe.attach_block_hasher(scheduler.kv.block_hasher)
        return scheduler.kv.get_computed_blocks(probe).num_tokens

    assert cached_tokens("a") == 8  # most recently used: intact (the last token is always computed)
    assert cached_tokens("b") == 0  # least recently used: evicted first


def test_chunked_prefill_with_long_prefill_threshold():
    scheduler = make_scheduler(
        num_blocks=1024,
        block_size=16,
        max_num_batched_tokens=1024,
        long_prefill_token_threshold=400,
        max_model_len=2048,
        max_num_seqs=8,
    )
    runner = FakeRunner(scheduler.kv.config)
    for i in range(3):
        scheduler.add_request(new_request(f"r{i}", [i * 1000 + t for t in range(800)], max_tokens=2))
    out, _ = step(scheduler, runner)
    assert [out.num_scheduled_tokens[f"r{i}"] for i in range(3)] == [400, 400, 224]
    out, _ = step(scheduler, runner)
    # Running first: r0 and r1 finish their prompts; r2 continues its chunk within the budget.
    assert [out.num_scheduled_tokens[f"r{i}"] for i in range(3)] == [400, 400, 224]
    run_until_done(scheduler, runner)
    assert scheduler.kv.usage == 0.0


def test_everything_returns_to_zero_after_finish_and_abort():
    scheduler = make_scheduler(num_blocks=32, block_size=BS, max_num_seqs=4)
    runner = FakeRunner(scheduler.kv.config)
    for i in range(8):
        scheduler.add_request(new_request(f"r{i}", [i] * (5 + i), max_tokens=6))
    step(scheduler, runner)
    step(scheduler, runner)
    aborted = scheduler.abort(["r0", "r7", "missing"])
    assert {o.req_id for o in aborted} == {"r0", "r7"}
    assert all(o.finish_reason is FinishReason.ABORT for o in aborted)
    out, _ = step(scheduler, runner)
    assert "r0" in out.finished_req_ids and "r7" not in out.finished_req_ids  # r7 never reached the runner
    run_until_done(scheduler, runner)
    assert scheduler.num_running == scheduler.num_waiting == 0
    assert scheduler.kv.usage == 0.0 and not scheduler.requests
    out, _ = step(scheduler, runner)  # the last finished ids reach the runner
    assert not runner.states


def test_preemption_fcfs_takes_the_last_running_and_requeues_it_first():
    # 6 usable blocks of 4 tokens; three requests of 8 prompt tokens each need 2 blocks, then grow.
    scheduler = make_scheduler(num_blocks=7, block_size=BS, max_num_seqs=3, max_model_len=24)
    runner = FakeRunner(scheduler.kv.config)
    for name in "abc":
        scheduler.add_request(new_request(name, [ord(name)] * 8, max_tokens=8))
    step(scheduler, runner)
    assert [r.request_id for r in scheduler.running] == ["a", "b", "c"]
    out, result = step(scheduler, runner)  # each needs a third block: 9 > 6, so c is preempted
    assert out.preempted_req_ids == {"c"} and result.stats.num_preemptions == 1
    assert scheduler.waiting.peek().request_id == "c"
    assert scheduler.get_request("c").status is RequestStatus.PREEMPTED
    outputs = run_until_done(scheduler, runner)
    assert {o.req_id for o in outputs if o.finished} == {"a", "b", "c"}


def test_preemption_priority_takes_the_lowest_priority():
    scheduler = make_scheduler(num_blocks=7, block_size=BS, max_num_seqs=3, max_model_len=24, policy="priority")
    runner = FakeRunner(scheduler.kv.config)
    for name, priority in (("a", 5), ("b", 0), ("c", 1)):
        scheduler.add_request(new_request(name, [ord(name)] * 8, max_tokens=8, priority=priority))
    step(scheduler, runner)
    assert [r.request_id for r in scheduler.running] == ["b", "c", "a"]  # admitted by priority
    out, _ = step(scheduler, runner)
    assert out.preempted_req_ids == {"a"}
    run_until_done(scheduler, runner)


def test_waiting_not_admitted_in_a_step_with_preemption():
    scheduler = make_scheduler(num_blocks=7, block_size=BS, max_num_seqs=4, max_model_len=24)
    runner = FakeRunner(scheduler.kv.config)
    for name in "ab":
        scheduler.add_request(new_request(name, [ord(name)] * 8, max_tokens=12))
    step(scheduler, runner)
    scheduler.add_request(new_request("z", [1], max_tokens=1))
    for _ in range(6):
        out, _ = step(scheduler, runner)
        if out.preempted_req_ids:
            assert not out.new_requests
            break
    else:
        raise AssertionError("expected a preemption")


@pytest.mark.parametrize(
    ("params", "tokens", "eos", "reason", "length", "stop_token"),
    [
        ({"max_tokens": 3}, [5, 6, 7, 8], None, FinishReason.LENGTH, 3, None),
        ({"max_tokens": 5}, [5, 2, 7], 2, FinishReason.STOP, 2, 2),
        ({"max_tokens": 5, "ignore_eos": True}, [5, 2, 7, 8, 9], 2, FinishReason.LENGTH, 5, None),
        ({"max_tokens": 5, "stop_token_ids": [7]}, [5, 6, 7, 8], None, FinishReason.STOP, 3, 7),
        ({"max_tokens": 5, "min_tokens": 3}, [2, 2, 2, 6], 2, FinishReason.STOP, 3, 2),
        ({"max_tokens": None}, [1] * 20, None, FinishReason.LENGTH, 10, None),  # max_model_len 16, prompt 6
    ],
)
def test_stop_conditions(params, tokens, eos, reason, length, stop_token):
    scheduler = make_scheduler(block_size=BS, max_model_len=16)
    scheduler.add_request(new_request("r", [3] * 6, params={"ignore_eos": False, **params}, eos_token_id=eos))
    feed = iter(tokens)
    produced = []
    for _ in range(40):
        out = scheduler.schedule()
        sampled = {}
        if (
            "r" in out.num_scheduled_tokens
            and scheduler.get_request("r").num_computed_tokens == scheduler.get_request("r").num_tokens
        ):
            sampled["r"] = [next(feed)]
        result = scheduler.update_from_output(out, ModelRunnerOutput(sampled_token_ids=sampled))
        for o in result.outputs:
            produced += o.new_token_ids
            if o.finished:
                assert (o.finish_reason, len(produced), o.stop_token_id) == (reason, length, stop_token)
                assert scheduler.kv.usage == 0.0 and not scheduler.has_unfinished_requests()
                return
    raise AssertionError("request did not finish")


def test_several_tokens_in_one_step_stop_at_the_stop_token():
    scheduler = make_scheduler(block_size=BS)
    scheduler.add_request(new_request("r", [1, 2, 3], max_tokens=10, params={"stop_token_ids": [9]}))
    out = scheduler.schedule()
    result = scheduler.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"r": [4, 9, 5]}))
    (output,) = result.outputs
    assert output.new_token_ids == [4, 9] and output.finish_reason is FinishReason.STOP


def test_sampling_mid_prefill_is_a_runner_bug():
    scheduler = make_scheduler(block_size=BS, max_num_batched_tokens=4)
    scheduler.add_request(new_request("r", list(range(10))))
    out = scheduler.schedule()
    with pytest.raises(ValueError, match="mid-prefill"):
        scheduler.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"r": [1]}))


def snapshot(scheduler):
    return (
        dict(scheduler.requests),
        [r.request_id for r in scheduler.waiting],
        scheduler.kv.num_free_blocks,
        set(scheduler._reserved_ids),
    )


@pytest.mark.parametrize(
    ("make", "param", "message"),
    [
        (lambda: new_request("e", []), "prompt", "at least one token"),
        (lambda: new_request("l", [1] * 129), "prompt", "129 tokens leaves no room for output in max_model_len=128"),
        (lambda: new_request("m", [1] * 128), "prompt", "128 tokens leaves no room for output in max_model_len=128"),
        (lambda: new_request("big", [1] * 100, max_tokens=20), "prompt", "needs up to 30 KV blocks .* only 15"),
        (lambda: new_request("dup", [1]), "request_id", "already in use"),
        (lambda: new_request("n", [1, 2], params={"n": 9}), "n", "n=9 exceeds max_num_seqs=8"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(make, param, message):
    scheduler = make_scheduler(num_blocks=16, block_size=BS)
    scheduler.add_request(new_request("dup", [1, 2, 3]))
    before = snapshot(scheduler)
    request = make()
    with pytest.raises(RequestValidationError, match=message) as info:
        scheduler.add_request(request)
    assert info.value.param == param
    assert snapshot(scheduler) == before


def test_max_tokens_below_one_is_refused_even_if_mutated_after_validation():
    scheduler = make_scheduler()
    request = new_request("r", [1, 2])
    request.sampling_params.max_tokens = 0
    with pytest.raises(RequestValidationError, match="max_tokens must be at least 1, got 0"):
        scheduler.add_request(request)
    assert not scheduler.requests


def test_budgets_change_at_runtime_with_validation():
    scheduler = make_scheduler(block_size=BS, max_num_batched_tokens=64, max_num_seqs=8)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.update_budgets(max_num_batched_tokens=6, max_num_seqs=2)
    for i in range(4):
        scheduler.add_request(new_request(f"r{i}", [i] * 5))
    out, result = step(scheduler, runner)
    assert out.total_num_scheduled_tokens == 6 and len(scheduler.running) == 2
    assert (result.stats.max_num_seqs, result.stats.max_num_batched_tokens) == (2, 6)
    with pytest.raises(SettingError, match=r"max_num_seqs must be in \[1, 4096\], got 0") as info:
        scheduler.update_budgets(max_num_seqs=0, max_num_batched_tokens=100)
    assert info.value.param == "max_num_seqs"
    assert scheduler.config.max_num_batched_tokens == 6  # nothing applied
    with pytest.raises(SettingError, match="must be an integer"):
        scheduler.update_budgets(max_num_batched_tokens=2.5)
    with pytest.raises(SettingError, match=r"max_num_batched_tokens \(1\) must be at least max_num_seqs \(2\)") as info:
        scheduler.update_budgets(max_num_batched_tokens=1)  # every running sequence needs a token per step
    assert info.value.param == "max_num_batched_tokens" and scheduler.config.max_num_batched_tokens == 6
    run_until_done(scheduler, runner)


def test_reset_prefix_cache_refused_while_running():
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(10))))
    step(scheduler, runner)
    assert scheduler.reset_prefix_cache() is False
    run_until_done(scheduler, runner)
    assert scheduler.reset_prefix_cache() is True
    scheduler.add_request(new_request("b", list(range(10))))
    _, result = step(scheduler, runner)
    assert result.stats.prefix_cache_hits == 0


def test_stats_count_prompt_and_generation_tokens():
    scheduler = make_scheduler(block_size=BS, max_num_batched_tokens=6)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", list(range(10)), max_tokens=3))
    totals = {"prompt": 0, "gen": 0, "scheduled": 0}
    while scheduler.has_unfinished_requests():
        _, result = step(scheduler, runner)
        totals["prompt"] += result.stats.num_prompt_tokens
        totals["gen"] += result.stats.num_generation_tokens
        totals["scheduled"] += result.stats.num_scheduled_tokens
    assert totals == {"prompt": 10, "gen": 3, "scheduled": 12}


def test_preempted_request_resumes_with_its_outputs_and_hits_its_own_blocks():
    # 8 usable blocks: three 8-token prompts take 6; in step 2 each needs a third block, so c preempts itself.
    scheduler = make_scheduler(num_blocks=9, block_size=BS, max_num_seqs=3, max_model_len=24)
    runner = FakeRunner(scheduler.kv.config)
    for name, max_tokens in (("a", 8), ("b", 2), ("c", 8)):
        scheduler.add_request(new_request(name, [ord(name)] * 8, max_tokens=max_tokens))
    step(scheduler, runner)
    out, _ = step(scheduler, runner)  # b finishes: its blocks make room for c's return
    assert out.preempted_req_ids == {"c"}
    victim = scheduler.get_request("c")
    produced = victim.output_token_ids
    assert len(produced) == 1 and victim.num_computed_tokens == 0
    for _ in range(20):
        out, _ = step(scheduler, runner)
        resumed = [r for r in out.new_requests if r.req_id == "c"]
        if resumed:
            break
    else:
        raise AssertionError("c never resumed")
    (data,) = resumed
    assert data.output_token_ids == produced
    assert data.prompt_token_ids == [ord("c")] * 8
    # Its two full prompt blocks were cached before it was preempted and were not reused since.
    assert data.num_computed_tokens == 8
    assert out.num_scheduled_tokens["c"] == 1
    run_until_done(scheduler, runner)


def test_priority_preemption_undoes_a_victim_scheduled_earlier_in_the_step():
    # 6 usable blocks. lo (priority 5) runs first; hi (priority 0) arrives later, so running is [lo, hi].
    scheduler = make_scheduler(num_blocks=7, block_size=BS, max_num_seqs=2, max_model_len=24, policy="priority")
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("lo", [1] * 9, max_tokens=8, priority=5))
    step(scheduler, runner)  # lo: 10 tokens, 3 blocks
    scheduler.add_request(new_request("hi", [2] * 12, max_tokens=8, priority=0))
    step(scheduler, runner)  # lo: 11 tokens; hi: 13 tokens, 3 blocks: the pool is full
    assert [r.request_id for r in scheduler.running] == ["lo", "hi"]
    # lo's token 10 fits its third block, so lo is scheduled first; hi's token 12 needs a fourth block,
    # and the lowest-priority victim is lo, already scheduled in this step: its scheduling is undone.
    out, result = step(scheduler, runner)
    assert out.preempted_req_ids == {"lo"}
    assert out.num_scheduled_tokens == {"hi": 1} and out.total_num_scheduled_tokens == 1
    assert result.stats.num_preemptions == 1 and scheduler.waiting.peek().request_id == "lo"
    run_until_done(scheduler, runner)


def test_abort_waiting_request_and_fork_parent_before_fork():
    scheduler = make_scheduler(block_size=BS, max_num_seqs=2, max_num_batched_tokens=4)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("p", list(range(10)), params={"n": 2}))
    scheduler.add_request(new_request("w", [1, 2, 3]))
    step(scheduler, runner)  # p prefills its first chunk; w waits (p holds both seats)
    assert scheduler.num_waiting == 1 and scheduler._reserved_seats == 1
    outputs = scheduler.abort(["w", "p"])
    assert sorted(o.req_id for o in outputs) == ["p", "w"]
    assert scheduler._reserved_seats == 0 and not scheduler._reserved_ids
    out, _ = step(scheduler, runner)
    assert out.finished_req_ids == {"p"}  # w never reached the runner
    assert scheduler.kv.usage == 0.0 and not runner.states
    scheduler.add_request(new_request("p-0", [1]))  # the reserved child ids are free again


def test_abort_between_schedule_and_update_is_skipped_and_reported_next_step():
    scheduler = make_scheduler(block_size=BS)
    runner = FakeRunner(scheduler.kv.config)
    scheduler.add_request(new_request("a", [1, 2, 3]))
    scheduler.add_request(new_request("b", [4, 5, 6]))
    out = scheduler.schedule()
    (aborted,) = scheduler.abort(["a"])  # the runner is already executing this step
    assert aborted.finish_reason is FinishReason.ABORT
    result = scheduler.update_from_output(out, runner.execute(out))
    assert [o.req_id for o in result.outputs] == ["b"]
    out, _ = step(scheduler, runner)
    assert out.finished_req_ids == {"a"} and "a" not in runner.states
    run_until_done(scheduler, runner)
    assert scheduler.kv.usage == 0.0
