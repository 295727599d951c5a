"""Beam searches in the scheduler, through the fake runner that checks every KV read: forks share blocks, a shared
last block is copied before it is written, pruned beams and finished or aborted searches give every block back."""

from __future__ import annotations

from paged_engine.core import Request
from paged_engine.core.request import FinishReason
from paged_engine.sampling_params import SamplingParams

from tests.core.helpers import FakeRunner, make_scheduler, step


def beam_request(req_id: str, prompt: list[int], width: int, max_tokens: int = 6) -> Request:
    params = SamplingParams(n=width, temperature=0.0, max_tokens=max_tokens, ignore_eos=True, use_beam_search=True)
    return Request(req_id, prompt, params, eos_token_id=0)


def held_blocks(scheduler) -> int:
    kv = scheduler.kv
    return len({b.block_id for m in kv.groups for t in m.req_to_blocks.values() for b in t if not b.is_null})


def test_a_search_forks_copies_on_write_and_frees_everything():
    scheduler = make_scheduler(num_blocks=64, block_size=4, enable_prefix_caching=False)
    runner = FakeRunner(scheduler.kv.config, vocab=20, seed=3)
    scheduler.add_request(beam_request("b", list(range(1, 11)), width=3))  # 10 tokens: two full blocks shared
    copies, outputs = 0, []
    while scheduler.has_unfinished_requests():
        out, result = step(scheduler, runner)
        copies += len(out.copy_on_write)
        outputs += result.outputs
        assert scheduler.kv.pool.num_used_blocks == held_blocks(scheduler)  # pruned beams hold nothing
        beams = [r for r in scheduler.running if r.is_beam]
        if beams:
            assert len(beams) == 3 and len({r.num_tokens for r in beams}) == 1
    assert copies > 0, "beams sharing a partial last block must copy it before writing"
    finals = [o for o in outputs if o.finished]
    assert [o.req_id for o in finals] == ["b-0", "b-1", "b-2"]
    assert all(len(o.new_token_ids) == 6 and o.finish_reason == FinishReason.LENGTH for o in finals)
    assert len({tuple(o.new_token_ids) for o in finals}) == 3
    step(scheduler, runner)  # the runner forgets the last beams
    assert scheduler.kv.pool.num_used_blocks == 0 and not runner.states and not scheduler._beams


def test_abort_by_request_id_ends_every_stream_and_frees_every_block():
    scheduler = make_scheduler(num_blocks=64, block_size=4)
    runner = FakeRunner(scheduler.kv.config, vocab=20)
    scheduler.add_request(beam_request("b", list(range(1, 8)), width=2, max_tokens=20))
    for _ in range(4):
        step(scheduler, runner)
    assert scheduler.kv.pool.num_used_blocks > 0
    outputs = scheduler.abort(["b"])
    assert [(o.req_id, o.finish_reason) for o in outputs] == [("b-0", FinishReason.ABORT), ("b-1", FinishReason.ABORT)]
    assert scheduler.kv.pool.num_used_blocks == 0 and not scheduler.requests
    assert not scheduler.has_unfinished_requests()
    assert scheduler.abort(["b"]) == []  # already gone


def test_a_search_holds_its_width_in_seats():
    scheduler = make_scheduler(num_blocks=64, block_size=4, max_num_seqs=3)
    runner = FakeRunner(scheduler.kv.config, vocab=20)
    scheduler.add_request(beam_request("b", [1, 2, 3], width=2, max_tokens=8))
    for i in range(3):
        params = SamplingParams(max_tokens=8, ignore_eos=True)
        scheduler.add_request(Request(f"r{i}", [4, 5, 6], params, eos_token_id=0))
    while scheduler.has_unfinished_requests():
        step(scheduler, runner)
        unseated = sum(g.num_unseated() for g in scheduler._beams.values())
        assert len(scheduler.running) + unseated <= 3
        if scheduler._beams:  # the search runs beside at most one other request
            assert sum(not r.is_beam for r in scheduler.running) <= 1
