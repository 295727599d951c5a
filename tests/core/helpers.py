"""Test doubles for the engine core: a fake model runner that checks the KV it reads, and invariant checks.

``FakeRunner`` keeps its own per-request state, fed only by ``SchedulerOutput`` (as the real runner is),
and a fake KV store: each slot records the (token, position) written to it. Before sampling, every
computed token "attends" to its window through the runner's block table and asserts it reads exactly the
tokens of its own sequence. Prefix hits with wrong content, a missed copy-on-write, a freed block still in
use or a block table out of sync therefore fail loudly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from paged_engine.core import (
    EngineCoreOutput,
    KVCacheConfig,
    KVCacheGroup,
    Request,
    Scheduler,
    SchedulerConfig,
    SlidingWindowSpec,
    StepResult,
)
from paged_engine.core.group_managers import cdiv
from paged_engine.core.kv_cache_spec import FullAttentionSpec
from paged_engine.core.scheduler_output import Logprobs, ModelRunnerOutput, SchedulerOutput
from paged_engine.sampling_params import SamplingParams

Slot = tuple[int, int]  # (token id, position)


@dataclass
class _RunnerRequest:
    tokens: list[int]
    num_computed: int
    tables: list[list[int]]
    n: int = 1
    num_logprobs: int | None = None  # beams report their top-K


@dataclass
class FakeRunner:
    config: KVCacheConfig
    vocab: int = 50
    seed: int = 0
    states: dict[str, _RunnerRequest] = field(default_factory=dict)
    kv: dict[int, list[Slot | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.block_size = self.config.block_size
        self.windows = [
            g.spec.sliding_window if isinstance(g.spec, SlidingWindowSpec) else None for g in self.config.groups
        ]

    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        for req_id in out.finished_req_ids | out.preempted_req_ids:
            assert req_id in self.states, f"runner told to forget unknown request {req_id}"
            del self.states[req_id]
        for new in out.new_requests:
            assert new.req_id not in self.states, f"{new.req_id} sent as new twice"
            self.states[new.req_id] = _RunnerRequest(
                list(new.prompt_token_ids) + list(new.output_token_ids),
                new.num_computed_tokens,
                [list(ids) for ids in new.block_ids],
                num_logprobs=new.sampling_params.logprobs,
            )
        for cached in out.cached_requests:
            state = self.states[cached.req_id]
            assert state.num_computed == cached.num_computed_tokens, cached.req_id
            for table, ids in zip(state.tables, cached.new_block_ids, strict=True):
                table.extend(ids)
        assert set(out.num_scheduled_tokens) == {r.req_id for r in out.new_requests} | {
            r.req_id for r in out.cached_requests
        }
        for src, dst in out.copy_on_write:
            assert src != 0 and dst != 0, "copy-on-write touched the null block"
            self.kv[dst] = list(self.kv.get(src, [None] * self.block_size))

        sampled: dict[str, list[int]] = {}
        logprobs: dict[str, list[Logprobs]] = {}
        for req_id, num_new in out.num_scheduled_tokens.items():
            state = self.states[req_id]
            start, end = state.num_computed, state.num_computed + num_new
            assert end <= len(state.tokens), f"{req_id}: scheduled past its tokens"
            for group, table in enumerate(state.tables):
                for pos in range(start, end):
                    block = table[pos // self.block_size]
                    assert block != 0, f"{req_id}: token {pos} of group {group} written to the null block"
                    self.kv.setdefault(block, [None] * self.block_size)[pos % self.block_size] = (
                        state.tokens[pos],
                        pos,
                    )
            for group, table in enumerate(state.tables):
                window = self.windows[group]
                for pos in range(start, end):
                    first = 0 if window is None else max(0, pos - window + 1)
                    for p in range(first, pos + 1):
                        block = table[p // self.block_size]
                        slot = self.kv.get(block, [None] * self.block_size)[p % self.block_size]
                        assert slot == (state.tokens[p], p), (
                            f"{req_id}: group {group} token {pos} reads position {p} from block {block} "
                            f"and finds {slot}, expected {(state.tokens[p], p)}"
                        )
            state.num_computed = end
            if end == len(state.tokens):
                token = self.rng.randrange(self.vocab)
                state.tokens.append(token)
                sampled[req_id] = [token]
                if state.num_logprobs is not None:
                    logprobs[req_id] = [self._top_logprobs(token, state.num_logprobs)]
        return ModelRunnerOutput(sampled_token_ids=sampled, logprobs=logprobs)

    def _top_logprobs(self, sampled: int, num: int) -> Logprobs:
        """Distinct tokens with decreasing logprobs (column 0: the sampled token), as the sampler reports them."""
        top = self.rng.sample(range(self.vocab), min(num, self.vocab))
        values = sorted((-self.rng.expovariate(1.0) for _ in top), reverse=True)
        return Logprobs([sampled, *top], [values[0], *values], [1, *range(1, len(top) + 1)])


def make_config(
    num_blocks: int, block_size: int, windows: tuple[int | None, ...] = (None,), layers_per_group: int = 1
) -> KVCacheConfig:
    groups = []
    for index, window in enumerate(windows):
        spec = FullAttentionSpec(block_size) if window is None else SlidingWindowSpec(block_size, window)
        names = tuple(f"layers.{index}.{j}" for j in range(layers_per_group))
        groups.append(KVCacheGroup(spec, names))
    return KVCacheConfig(num_blocks=num_blocks, groups=tuple(groups))


def make_scheduler(
    num_blocks: int = 64,
    block_size: int = 4,
    windows: tuple[int | None, ...] = (None,),
    **config: object,
) -> Scheduler:
    defaults: dict[str, object] = {"max_num_batched_tokens": 64, "max_num_seqs": 8, "max_model_len": 128}
    defaults.update(config)
    if "max_num_seqs" not in config:  # the contract's default rule: never more sequences than tokens per step
        defaults["max_num_seqs"] = min(8, defaults["max_num_batched_tokens"])  # type: ignore[call-overload]
    return Scheduler(SchedulerConfig(**defaults), make_config(num_blocks, block_size, windows))  # type: ignore[arg-type]


def check_invariants(scheduler: Scheduler) -> None:
    """Every structural invariant of the scheduler and its KV-cache manager."""
    kv = scheduler.kv
    pool = kv.pool
    # Ref counts equal the references held by requests' block tables.
    refs: dict[int, int] = {}
    for manager in kv.groups:
        for req_id, table in manager.req_to_blocks.items():
            assert req_id in scheduler.requests, f"blocks held by unknown request {req_id}"
            for block in table:
                if not block.is_null:
                    refs[block.block_id] = refs.get(block.block_id, 0) + 1
    for block in pool.blocks[1:]:
        assert block.ref_cnt == refs.get(block.block_id, 0), f"block {block.block_id}: ref {block.ref_cnt}"
    assert pool.null_block.ref_cnt == 0 and pool.null_block.prev_free is None
    # Free queue: exactly the unreferenced blocks, each once.
    free = list(pool.free_queue)
    ids = [b.block_id for b in free]
    assert len(ids) == len(set(ids)) == pool.num_free_blocks, "block twice in the free queue"
    assert all(b.ref_cnt == 0 for b in free)
    assert pool.num_free_blocks + pool.num_used_blocks == pool.num_usable_blocks
    assert pool.num_used_blocks == len(refs)
    # Prefix-cache index consistent with the blocks.
    for key, block in pool.cached.items():
        assert block.cache_key == key and block.block_hash == key[0]
    # Requests: waiting ones hold nothing; running ones cover their computed tokens.
    for request in scheduler.waiting:
        assert not kv.holds_blocks(request.request_id), f"waiting {request.request_id} holds blocks"
    for request in scheduler.running:
        computed = request.num_computed_tokens
        assert computed <= request.num_tokens
        for manager, table in zip(kv.groups, kv.get_blocks(request.request_id), strict=True):
            assert len(table) >= cdiv(computed, kv.block_size), f"{request.request_id} lacks blocks"
            first = manager.first_needed_block(computed)
            for block in table[first : cdiv(computed, kv.block_size)]:
                assert not block.is_null, f"{request.request_id}: needed block is the null block"


def step(scheduler: Scheduler, runner: FakeRunner) -> tuple[SchedulerOutput, StepResult]:
    """One engine step through the fake runner, with every invariant checked afterwards."""
    out = scheduler.schedule()
    assert out.total_num_scheduled_tokens <= scheduler.config.max_num_batched_tokens
    result = scheduler.update_from_output(out, runner.execute(out))
    check_invariants(scheduler)
    check_runner_tables(scheduler, runner)
    return out, result


def check_runner_tables(scheduler: Scheduler, runner: FakeRunner) -> None:
    """The runner's block tables, built only from SchedulerOutput, match the manager's: equal ids wherever the
    manager holds a real block (where it holds the null block, the runner may keep a stale id it never reads)."""
    for request in scheduler.running:
        state = runner.states.get(request.request_id)
        if state is None:  # a forked child not scheduled yet
            continue
        for runner_table, blocks in zip(state.tables, scheduler.kv.get_blocks(request.request_id), strict=True):
            assert len(runner_table) == len(blocks), request.request_id
            for runner_id, block in zip(runner_table, blocks, strict=True):
                assert block.is_null or runner_id == block.block_id, f"{request.request_id}: table out of sync"


def run_until_done(scheduler: Scheduler, runner: FakeRunner, max_steps: int = 2000) -> list[EngineCoreOutput]:
    outputs: list[EngineCoreOutput] = []
    for _ in range(max_steps):
        if not scheduler.has_unfinished_requests():
            return outputs
        outputs.extend(step(scheduler, runner)[1].outputs)
    raise AssertionError(
        f"requests still unfinished after {max_steps} steps: {scheduler.running + list(scheduler.waiting)}"
    )


def new_request(req_id: str, tokens: list[int], max_tokens: int = 4, **kwargs: object) -> Request:
    params = {"max_tokens": max_tokens, "ignore_eos": True}
    params.update(kwargs.pop("params", {}))  # type: ignore[arg-type]
    return Request(req_id, tokens, SamplingParams(**params), **kwargs)  # type: ignore[arg-type]
