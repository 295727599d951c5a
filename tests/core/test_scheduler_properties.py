"""Random workloads (add / step / abort, random budgets, tiny pools), invariants checked after every step."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from paged_engine.core import Request, RequestValidationError, SettingError
from paged_engine.sampling_params import SamplingParams

from tests.core.helpers import FakeRunner, check_invariants, make_scheduler, step

BASE = [7, 3, 9, 1, 4, 4, 8, 2, 6, 5, 0, 3, 1, 7, 9, 2, 8, 8, 5, 6] * 3

add_op = st.tuples(
    st.just("add"),
    st.integers(0, 16),  # shared prefix length
    st.lists(st.integers(0, 9), max_size=6),  # own tail
    st.integers(1, 12),  # max_tokens
    st.sampled_from([1, 1, 1, 2, 3]),  # n
    st.integers(0, 3),  # priority
    st.sampled_from([None, None, "s"]),  # cache salt
    st.booleans(),  # ignore_eos
    st.integers(0, 2),  # min_tokens
    st.sampled_from([None, None, None, True, False, "never"]),  # beam search (its early_stopping), or sampling
)
ops_strategy = st.lists(
    st.one_of(
        add_op,
        st.just(("step",)),
        st.just(("step",)),
        st.tuples(st.just("abort"), st.integers(0, 30)),
        st.tuples(st.just("budget"), st.integers(1, 48), st.sampled_from([0, 2, 5])),
        st.just(("reset",)),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_workloads_keep_every_invariant(data):
    windows = data.draw(st.sampled_from([(None,), (None,), (None, 5), (6,), (None, 3, 9)]), label="windows")
    max_num_seqs = data.draw(st.integers(1, 6), label="max_num_seqs")
    # every running sequence needs a token per step: the engine contract refuses fewer tokens than sequences
    max_num_batched_tokens = data.draw(st.integers(max_num_seqs, 32), label="max_num_batched_tokens")
    block_size = data.draw(st.sampled_from([1, 2, 4]), label="block_size")
    max_model_len = data.draw(st.integers(8, 40), label="max_model_len")
    # Tiny pools: room for one to three longest requests (+1 block per group for a fork's copy).
    pool_factor = data.draw(st.sampled_from([1, 1, 2, 3]), label="pool_factor")
    num_blocks = 1 + len(windows) * (pool_factor * -(-max_model_len // block_size) + 1)
    scheduler = make_scheduler(
        num_blocks=num_blocks,
        block_size=block_size,
        windows=windows,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        long_prefill_token_threshold=data.draw(st.sampled_from([0, 0, 3, 7]), label="threshold"),
        policy=data.draw(st.sampled_from(["fcfs", "priority"]), label="policy"),
        enable_prefix_caching=data.draw(st.booleans(), label="caching"),
    )
    kv = scheduler.kv
    runner = FakeRunner(scheduler.kv.config, vocab=10, seed=data.draw(st.integers(0, 5), label="seed"))
    added: dict[str, int] = {}  # request id -> n
    finished: set[str] = set()

    def do_step() -> None:
        out, result = step(scheduler, runner)
        assert out.total_num_scheduled_tokens <= scheduler.config.max_num_batched_tokens
        for name, happened in (
            ("preemption", result.stats.num_preemptions),
            ("prefix hit", result.stats.prefix_cache_hits),
            ("copy-on-write", out.copy_on_write),
            ("forked child", any(r.parent_request_id for r in scheduler.running)),
            ("beam search advanced", any(r.is_beam and r.num_output_tokens for r in scheduler.running)),
            ("beam preempted", any(r.is_beam for r in scheduler.waiting if r.num_preemptions)),
            (
                "out-of-window block freed",
                any(b.is_null for m in kv.groups for t in m.req_to_blocks.values() for b in t),
            ),
        ):
            if happened:
                event(name)  # coverage of the interesting paths, shown by --hypothesis-show-statistics
        beam_seats = sum(g.num_unseated() for g in scheduler._beams.values())
        assert len(scheduler.running) + scheduler._reserved_seats + beam_seats <= max_num_seqs
        finished.update(o.req_id for o in result.outputs if o.finished)

    for number, op in enumerate(data.draw(ops_strategy, label="ops")):
        if op[0] == "add":
            _, prefix, tail, max_tokens, n, priority, salt, ignore_eos, min_tokens, beam = op
            if beam is None:
                params = SamplingParams(
                    n=n, max_tokens=max_tokens, ignore_eos=ignore_eos, min_tokens=min(min_tokens, max_tokens)
                )
            else:
                params = SamplingParams(
                    n=n, temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos, use_beam_search=True,
                    early_stopping=beam, length_penalty=float(min_tokens) - 0.5,
                )  # fmt: skip
            req_id = f"r{number}"
            request = Request(req_id, BASE[:prefix] + tail, params, eos_token_id=0, priority=priority, cache_salt=salt)
            before = (len(scheduler.requests), len(scheduler.waiting), scheduler.kv.num_free_blocks)
            try:
                scheduler.add_request(request)
            except RequestValidationError:
                event("request refused")
                assert (len(scheduler.requests), len(scheduler.waiting), scheduler.kv.num_free_blocks) == before
                continue
            added[req_id] = n
        elif op[0] == "step":
            do_step()
        elif op[0] == "budget":  # live changes through the admin API
            if op[1] < max_num_seqs:
                with pytest.raises(SettingError, match="must be at least max_num_seqs"):
                    scheduler.update_budgets(max_num_batched_tokens=op[1], long_prefill_token_threshold=op[2])
                event("budget refused")
                continue
            scheduler.update_budgets(max_num_batched_tokens=op[1], long_prefill_token_threshold=op[2])
        elif op[0] == "reset":
            if scheduler.reset_prefix_cache():
                assert not kv.pool.cached and kv.pool.num_used_blocks == 0
        else:
            ids = sorted(added)
            if ids:
                outputs = scheduler.abort([ids[op[1] % len(ids)]])
                finished.update(o.req_id for o in outputs)
                check_invariants(scheduler)

    for _ in range(3000):  # no new arrivals: everything must finish
        if not scheduler.has_unfinished_requests():
            break
        do_step()
    assert not scheduler.has_unfinished_requests(), "starvation: requests never finished"
    do_step()  # deliver the last finished ids to the runner
    assert scheduler.kv.usage == 0.0 and not scheduler.requests and not runner.states
    for req_id, n in added.items():
        children = {f"{req_id}-{i}" for i in range(n)} if n > 1 else set()
        assert req_id in finished or (children and children <= finished), f"{req_id} never reported finished"
