"""The scheduler: each step, hand out a token budget so every request's computed tokens catch up with its tokens.

One step is ``schedule()`` → model runner → ``update_from_output()``:

* Running requests are served first, in queue order. One that cannot get KV blocks preempts others by
  recompute (the last running under FCFS, the lowest priority under the priority policy; possibly
  itself): the victim's blocks are freed and it goes back to the front of the waiting queue.
* Waiting requests are admitted only when nothing was preempted in this step, while the token budget,
  ``max_num_seqs`` and the pool allow. A new request first reuses the longest cached prefix.
* Prefill is chunked: a request gets at most the remaining budget per step, and at most
  ``long_prefill_token_threshold`` tokens when set, so long prompts do not starve decodes.

Parallel sampling (``n > 1``): the parent computes the prompt except its last token once, then is forked
into ``n`` children ``f"{parent_id}-{i}"`` that share its blocks (copy-on-write). Each child computes the
last prompt token itself and samples independently. The parent counts as ``n`` running requests from
admission on, so forking never exceeds ``max_num_seqs``.

Beam search (``use_beam_search``, width ``n``): the request computes its prompt as beam 0 of a
:class:`BeamGroup`; each beam reports its top-``K`` logprobs instead of appending its sampled token. Once every
live beam of a group has reported, the policy picks the next beams, which are forked from their parents' block
tables exactly like ``n > 1`` children (new ids, shared blocks, copy-on-write of a shared last block), and the
parents are freed in the same step, so pruned beams give their blocks back at once. A group holds ``n`` seats
from admission to its end; its outputs are its best ``n`` hypotheses, all in one final step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .beam_group import BeamGroup
from .beam_search import BeamSearch
from .engine_core_output import EngineCoreOutput
from .kv_cache_manager import ComputedBlocks, KVCacheManager, SlotAllocation
from .kv_cache_spec import KVCacheConfig
from .request import FinishReason, Request, RequestStatus, child_request_id
from .request_queue import make_queue
from .scheduler_config import SchedulerConfig, SettingError
from .scheduler_output import CachedRequestData, Logprobs, ModelRunnerOutput, NewRequestData, SchedulerOutput
from .stats import SchedulerStats
from .stop_conditions import check_stop


class RequestValidationError(ValueError):
    """A request cannot be served; ``param`` names the offending value."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class StepResult(NamedTuple):
    outputs: list[EngineCoreOutput]
    stats: SchedulerStats


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache_config: KVCacheConfig) -> None:
        config.validate()
        if config.max_model_len is None:
            raise SettingError("max_model_len", "the scheduler needs max_model_len resolved (the model's)")
        if config.max_num_seqs is None or config.max_num_batched_tokens is None:
            raise SettingError("max_num_batched_tokens", "the scheduler needs its budgets resolved (.resolved())")
        self.config = config
        self.kv = KVCacheManager(kv_cache_config, config.enable_prefix_caching, config.hash_algorithm)
        self.requests: dict[str, Request] = {}
        self.waiting = make_queue(config.policy)
        self.running: list[Request] = []
        self._children: dict[str, list[str]] = {}  # fork parent id -> ids of its live children
        self._reserved_ids: set[str] = set()  # child ids of parents not forked yet
        self._reserved_seats = 0  # extra seats of running fork parents (n - 1 each)
        self._beams: dict[str, BeamGroup] = {}  # beam-search request id -> its group
        self._sent: set[str] = set()  # requests whose state the model runner holds
        self._finished_ids: set[str] = set()  # to report in the next SchedulerOutput
        # Counters of the current step, reported and reset by update_from_output.
        self._step_preemptions = 0
        self._reported_queries = 0  # prefix-cache counters of the KV-cache manager already reported
        self._reported_hits = 0

    # ---- queries ----------------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def get_request(self, request_id: str) -> Request | None:
        return self.requests.get(request_id)

    # ---- budgets ----------------------------------------------------------------------------------------
    def update_budgets(
        self,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        long_prefill_token_threshold: int | None = None,
    ) -> None:
        """Change budgets live (admin API). All values are validated before any is applied. Lowering
        ``max_num_seqs`` below the running count preempts nothing; the surplus drains as requests finish."""
        candidate = {
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "long_prefill_token_threshold": long_prefill_token_threshold,
        }
        updates = {k: v for k, v in candidate.items() if v is not None}
        probe = SchedulerConfig(**{**self.config.__dict__, **updates})  # validates
        for name in updates:
            setattr(self.config, name, getattr(probe, name))

    # ---- intake -----------------------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a request; bad input raises ``RequestValidationError`` and leaves the scheduler unchanged."""
        self._validate(request)
        params = request.sampling_params
        if self.kv.block_hasher is not None:
            request.attach_block_hasher(self.kv.block_hasher)
        request.status = RequestStatus.WAITING
        if params.use_beam_search:
            self._add_beam_search(request)
            return
        if request.is_fork_parent and request.num_prompt_tokens == 1:
            # Nothing to share before the last prompt token: the children start independently.
            children = [request.fork_child(i) for i in range(params.n)]
            self._children[request.request_id] = [c.request_id for c in children]
            for child in children:
                child.status = RequestStatus.WAITING
                self.requests[child.request_id] = child
                self.waiting.add(child)
            return
        if request.is_fork_parent:
            self._reserved_ids.update(self._child_ids(request))
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def _add_beam_search(self, request: Request) -> None:
        params = request.sampling_params
        stop = set(params.stop_token_ids)
        if request.eos_token_id is not None and not params.ignore_eos:
            stop.add(request.eos_token_id)
        room = self.config.max_model_len - request.num_prompt_tokens  # type: ignore[operator]
        search = BeamSearch(
            width=params.n,
            max_new_tokens=room if params.max_tokens is None else min(params.max_tokens, room),
            stop_token_ids=frozenset(stop),
            length_penalty=params.length_penalty,
            early_stopping=params.early_stopping,  # type: ignore[arg-type]
        )
        group = BeamGroup(request.request_id, search, [request])
        request.sampling_params = params.beam_member_params(search.num_candidates)
        request.is_beam = True
        self._beams[request.request_id] = group
        if params.n > 1:
            self._reserved_ids.update(group.stream_ids())
        self.requests[request.request_id] = request
        self.waiting.add(request)

    @staticmethod
    def _child_ids(request: Request) -> list[str]:
        return [child_request_id(request.request_id, i) for i in range(request.sampling_params.n)]

    def _id_taken(self, request_id: str) -> bool:
        return (
            request_id in self.requests
            or request_id in self._reserved_ids
            or request_id in self._children
            or request_id in self._beams
        )

    def _validate(self, request: Request) -> None:
        cfg = self.config
        rid = request.request_id
        if self._id_taken(rid):
            raise RequestValidationError("request_id", f"request id {rid!r} is already in use")
        params = request.sampling_params
        forks = request.is_fork_parent or (params.use_beam_search and params.n > 1)
        if forks and any(self._id_taken(c) for c in self._child_ids(request)):
            raise RequestValidationError("request_id", f'child ids of {rid!r} ("{rid}-<i>") are already in use')
        num_prompt = request.num_prompt_tokens
        if num_prompt == 0:
            raise RequestValidationError("prompt", f"request {rid!r}: the prompt must contain at least one token")
        if request.num_output_tokens != 0 or request.num_computed_tokens != 0:
            raise RequestValidationError("request", f"request {rid!r} was already scheduled once")
        if num_prompt >= cfg.max_model_len:  # as the front-ends' RequestLimits: room for at least one output token
            raise RequestValidationError(
                "prompt",
                f"request {rid!r}: prompt of {num_prompt} tokens leaves no room for output in "
                f"max_model_len={cfg.max_model_len}",
            )
        if params.max_tokens is not None and params.max_tokens < 1:
            raise RequestValidationError("max_tokens", f"max_tokens must be at least 1, got {params.max_tokens}")
        if params.n > cfg.max_num_seqs:
            raise RequestValidationError("n", f"n={params.n} exceeds max_num_seqs={cfg.max_num_seqs}")
        max_tokens = cfg.max_model_len if params.max_tokens is None else params.max_tokens
        total = min(num_prompt + max_tokens, cfg.max_model_len)
        kv_tokens = max(num_prompt, total - 1)  # the last sampled token is never fed back
        chunk = cfg.max_num_batched_tokens
        if cfg.long_prefill_token_threshold:
            chunk = min(chunk, cfg.long_prefill_token_threshold)
        needed = self.kv.max_blocks_for(kv_tokens, chunk, extra_per_group=1 if params.n > 1 else 0)
        usable = self.kv.pool.num_usable_blocks
        if params.use_beam_search and needed * params.n > usable:
            raise RequestValidationError(
                "n",
                f"request {rid!r}: {params.n} beams of up to {needed} KV blocks each ({kv_tokens} tokens) may need "
                f"{needed * params.n} blocks but the pool has only {usable}; lower n, the prompt or max_tokens",
            )
        if needed > usable:
            raise RequestValidationError(
                "prompt",
                f"request {rid!r} needs up to {needed} KV blocks ({kv_tokens} tokens) but the pool has only "
                f"{usable}; shorten the prompt or max_tokens",
            )

    # ---- one step ---------------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        scheduled: dict[str, int] = {}
        allocations: dict[str, SlotAllocation] = {}
        preempted: list[Request] = []

        running = self.running  # preemption removes from this same list
        allocate_slots = self.kv.allocate_slots
        num_new_tokens = self._num_new_tokens
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            num_new = num_new_tokens(request, request.num_computed_tokens, budget)
            if num_new <= 0:
                index += 1
                continue
            allocation = allocate_slots(request, num_new)
            if allocation is None and len(running) == 1:
                num_new = self._shrink_to_fit(request, num_new, None) or num_new
                allocation = allocate_slots(request, num_new)
            while allocation is None:
                victim = self._pick_victim()
                victim_index = running.index(victim)
                if victim.request_id in scheduled:  # only under the priority policy
                    budget += scheduled.pop(victim.request_id)
                    allocations.pop(victim.request_id)
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
                if victim_index < index:
                    index -= 1
                allocation = allocate_slots(request, num_new)
            if allocation is None:
                continue  # the request preempted itself; ``index`` now points at its successor
            scheduled[request.request_id] = num_new
            allocations[request.request_id] = allocation
            budget -= num_new
            index += 1

        if not preempted:
            budget = self._admit_waiting(budget, scheduled, allocations)
        return self._build_output(scheduled, allocations, preempted)

    def _admit_waiting(self, budget: int, scheduled: dict[str, int], allocations: dict[str, SlotAllocation]) -> int:
        max_seqs = self.config.max_num_seqs
        beam_seats = sum(g.num_unseated() for g in self._beams.values()) if self._beams else 0
        while self.waiting and budget > 0:
            request = self.waiting.peek()
            group = self._beams[request.parent_request_id or request.request_id] if request.is_beam else None
            if group is not None:
                seats = 0 if group.started else group.width  # a started group's seats are held already
            else:
                seats = request.sampling_params.n if request.is_fork_parent else 1
            if len(self.running) + self._reserved_seats + beam_seats + seats > max_seqs:
                break
            computed = None
            num_computed = request.num_computed_tokens
            # A request that wants prompt logprobs must compute every prompt position, so it skips the cache.
            wants_prompt_logprobs = request.sampling_params.prompt_logprobs is not None
            if self.kv.enable_caching and not wants_prompt_logprobs and not self.kv.holds_blocks(request.request_id):
                computed = self.kv.get_computed_blocks(request, max_hit_tokens=request.schedule_target - 1)
                num_computed += computed.num_tokens
            num_new = self._num_new_tokens(request, num_computed, budget)
            if not self.running:
                num_new = self._shrink_to_fit(request, num_new, computed) or num_new
            allocation = self.kv.allocate_slots(request, num_new, computed)
            if allocation is None:
                break
            self.waiting.pop()
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_computed
            request.num_computed_tokens = num_computed
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            if group is None:
                self._reserved_seats += seats - 1
            elif group.started:
                beam_seats -= 1
            else:
                group.started = True
                beam_seats += group.width - 1
            scheduled[request.request_id] = num_new
            allocations[request.request_id] = allocation
            budget -= num_new
        return budget

    def _num_new_tokens(self, request: Request, num_computed: int, budget: int) -> int:
        num_new = len(request.all_token_ids) - num_computed - request.is_fork_parent  # see Request.schedule_target
        threshold = self.config.long_prefill_token_threshold
        if threshold and num_new > threshold:
            num_new = threshold
        return num_new if num_new < budget else budget

    def _shrink_to_fit(self, request: Request, num_new: int, computed: ComputedBlocks | None) -> int:
        """Largest chunk of at most ``num_new`` tokens the pool can hold now; 0 if not even one token fits.

        Used only for a request running alone, which has nobody to preempt: without it, a prefill chunk
        larger than the whole pool (possible after ``max_num_batched_tokens`` was raised live) would be
        retried forever. Validation guarantees that one token always fits a request running alone.
        """
        if self.kv.can_allocate(request, num_new, computed):
            return num_new
        low, high = 0, num_new - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self.kv.can_allocate(request, mid, computed):
                low = mid
            else:
                high = mid - 1
        return low

    def _pick_victim(self) -> Request:
        if self.config.policy == "priority":
            return max(reversed(self.running), key=Request.sort_key)
        return self.running[-1]

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        if request.is_fork_parent:
            self._reserved_seats -= request.sampling_params.n - 1
        self.kv.free(request.request_id)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend(request)
        self._step_preemptions += 1

    def _build_output(
        self, scheduled: dict[str, int], allocations: dict[str, SlotAllocation], preempted: list[Request]
    ) -> SchedulerOutput:
        out = SchedulerOutput()
        requests, sent, cached_requests = self.requests, self._sent, out.cached_requests
        for req_id, num_new in scheduled.items():
            request = requests[req_id]
            allocation = allocations[req_id]
            if req_id in sent:
                if allocation.copy_on_write:
                    raise RuntimeError(f"copy-on-write for {req_id!r}, whose block table the runner already holds")
                cached_requests.append(CachedRequestData(req_id, allocation.new_block_ids, request.num_computed_tokens))
            else:
                out.new_requests.append(
                    NewRequestData(
                        req_id,
                        request.prompt_token_ids,
                        request.output_token_ids,
                        request.sampling_params,
                        self.kv.get_block_ids(req_id),
                        request.num_computed_tokens,
                        request.adapter_id,
                    )
                )
                sent.add(req_id)
                out.copy_on_write.extend(allocation.copy_on_write)  # only ever for a child's first step
            request.num_computed_tokens += num_new
        out.num_scheduled_tokens = scheduled
        out.total_num_scheduled_tokens = sum(scheduled.values())
        for request in preempted:
            if request.request_id in self._sent:
                self._sent.discard(request.request_id)
                out.preempted_req_ids.add(request.request_id)
        out.finished_req_ids, self._finished_ids = self._finished_ids, set()
        return out

    # ---- results ----------------------------------------------------------------------------------------
    def update_from_output(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput) -> StepResult:
        """Append sampled tokens, apply stop conditions, free finished requests, fork parents whose prompt is
        computed. Requests aborted or preempted since ``scheduler_output`` was made are skipped; requests whose
        own part of the step failed (``runner_output.failed``) finish with ``FinishReason.ERROR``."""
        outputs: list[EngineCoreOutput] = []
        for req_id, error in runner_output.failed.items():  # finished first, so the loop below skips them
            outputs += self._finish(req_id, RequestStatus.FINISHED_ERROR, error)
        num_prompt_tokens = 0
        num_generated = 0
        finished = False
        requests = self.requests
        cache_blocks = self.kv.cache_blocks
        block_size = self.kv.block_size
        all_sampled = runner_output.sampled_token_ids
        all_prompt_logprobs = runner_output.prompt_logprobs
        running = RequestStatus.RUNNING
        for req_id, num_scheduled in scheduler_output.num_scheduled_tokens.items():
            request = requests.get(req_id)
            if request is None or request.status is not running:
                continue
            computed = request.num_computed_tokens
            start = computed - num_scheduled
            if start < request.num_prompt_tokens:
                num_prompt_tokens += min(computed, request.num_prompt_tokens) - start
            if computed // block_size > start // block_size:  # a block became full in this step
                cache_blocks(request)
            if request.is_beam:
                if all_sampled.get(req_id):
                    outputs += self._beam_reported(request, runner_output.logprobs[req_id][0])
                    num_generated += 1
                continue
            prompt_logprobs = all_prompt_logprobs.get(req_id) if all_prompt_logprobs else None
            if request.is_fork_parent:
                request.prompt_logprobs.extend(prompt_logprobs or ())
                if computed >= request.schedule_target:
                    self._fork(request)
                continue
            if request.prompt_logprobs:  # a forked child's first output carries its parent's
                prompt_logprobs = request.prompt_logprobs + list(prompt_logprobs or ())
                request.prompt_logprobs = []
            sampled = all_sampled.get(req_id)
            if not sampled and not prompt_logprobs:
                continue
            if sampled and computed < len(request.all_token_ids):
                raise ValueError(
                    f"runner sampled for {req_id!r} mid-prefill ({computed} of {request.num_tokens} tokens computed)"
                )
            new_tokens = self._append_tokens(request, sampled) if sampled else []
            num_generated += len(new_tokens)
            outputs.append(self._make_output(request, new_tokens, runner_output, prompt_logprobs or []))
            if request.status.finished:
                self._release(request)
                finished = True
        if finished:
            self.running = [r for r in self.running if not r.status.finished]
        return StepResult(outputs, self._take_stats(scheduler_output, num_prompt_tokens, num_generated))

    def _append_tokens(self, request: Request, sampled: Iterable[int]) -> list[int]:
        new_tokens = []
        for token in sampled:
            request.append_output_token(token)
            new_tokens.append(token)
            if check_stop(request, self.config.max_model_len):
                break
        return new_tokens

    @staticmethod
    def _make_output(
        request: Request, new_tokens: list[int], runner_output: ModelRunnerOutput, prompt_logprobs: list
    ) -> EngineCoreOutput:
        return EngineCoreOutput(
            request.request_id,
            new_tokens,
            request.finish_reason if request.status.finished else None,
            request.stop_token_id,
            request.num_cached_tokens if request.num_cached_tokens > 0 else 0,
            runner_output.logprobs.get(request.request_id, []) if runner_output.logprobs else [],
            prompt_logprobs,
            request.parent_request_id,
            request.index,
        )

    def _fork(self, parent: Request) -> None:
        children = [parent.fork_child(i) for i in range(parent.sampling_params.n)]
        child_ids = [c.request_id for c in children]
        self.kv.fork(parent.request_id, child_ids)
        self.kv.free(parent.request_id)
        parent.status = RequestStatus.FORKED
        position = self.running.index(parent)
        self.running[position : position + 1] = children
        self._reserved_seats -= len(children) - 1
        self._reserved_ids.difference_update(child_ids)
        del self.requests[parent.request_id]
        for child in children:
            self.requests[child.request_id] = child
        self._children[parent.request_id] = child_ids
        self._forget_in_runner(parent.request_id)

    def _beam_reported(self, beam: Request, logprobs: Logprobs) -> list[EngineCoreOutput]:
        """Record one beam's candidates; once every live beam of its group reported, advance the group: fork the
        chosen continuations from their parents' blocks, then free every parent (pruned ones included)."""
        group = self._beams[beam.parent_request_id or beam.request_id]
        if not group.report(beam.request_id, logprobs):
            return []
        parents = group.members
        continuations = group.search.step(group.take_reports())
        children = [parents[c.parent].fork_child(0, group.new_member_id()) for c in continuations]
        for parent_index, parent in enumerate(parents):
            ids = [
                child.request_id for child, c in zip(children, continuations, strict=True) if c.parent == parent_index
            ]
            self.kv.fork(parent.request_id, ids)
        for child, continuation in zip(children, continuations, strict=True):
            child.append_output_token(continuation.token_id)
            child.parent_request_id = group.request_id
            child.is_beam = True
        computed = [p.status is RequestStatus.RUNNING for p in parents]  # else preempted after reporting
        position = next((i for i, r in enumerate(self.running) if r.is_beam and r in parents), len(self.running))
        for parent in parents:
            self._retire_beam(parent)
        running_children = []
        for child, continuation in zip(children, continuations, strict=True):
            self.requests[child.request_id] = child
            if computed[continuation.parent]:
                running_children.append(child)
            else:
                child.status = RequestStatus.PREEMPTED
                self.waiting.prepend(child)
        self.running[position:position] = running_children
        group.members = children
        if not group.search.done:
            return []
        del self._beams[group.request_id]
        self._reserved_ids.difference_update(group.stream_ids())
        return group.results(max(0, parents[0].num_cached_tokens))

    def _retire_beam(self, beam: Request) -> None:
        """A beam whose step is over: its children (if any) hold their own references to its blocks."""
        if beam.status is RequestStatus.RUNNING:
            self.running.remove(beam)
        else:
            self.waiting.remove(beam)
        beam.status = RequestStatus.FORKED
        self._release(beam)

    def _release(self, request: Request) -> None:
        """Free a finished request's blocks and forget it; the runner hears of it in the next step."""
        self.kv.free(request.request_id)
        del self.requests[request.request_id]
        self._forget_in_runner(request.request_id)
        parent_id = request.parent_request_id
        if parent_id is not None and parent_id in self._children:
            siblings = self._children[parent_id]
            siblings.remove(request.request_id)
            if not siblings:
                del self._children[parent_id]

    def _forget_in_runner(self, request_id: str) -> None:
        if request_id in self._sent:
            self._sent.discard(request_id)
            self._finished_ids.add(request_id)

    def abort(self, request_ids: Iterable[str]) -> list[EngineCoreOutput]:
        """Abort requests (a fork parent's id aborts all its children); unknown or finished ids are ignored,
        since a request may finish while its abort is in flight."""
        return [out for rid in request_ids for out in self._finish(rid, RequestStatus.FINISHED_ABORTED)]

    def _finish(self, request_id: str, status: RequestStatus, error: str | None = None) -> list[EngineCoreOutput]:
        """End a live request (or every child of a fork parent, or a whole beam search, named by its id or one of
        its beams') with ``status``, freeing its blocks."""
        request = self.requests.get(request_id)
        is_beam = request is not None and request.is_beam
        group = self._beams.get((request.parent_request_id or request_id) if is_beam else request_id)  # type: ignore[union-attr]
        if group is not None:
            return self._end_beam_search(group, status, error)
        outputs = []
        targets = [request_id] if request_id in self.requests else []
        targets += list(self._children.get(request_id, ()))
        for target in targets:
            request = self.requests[target]
            if request.status is RequestStatus.RUNNING:
                self.running.remove(request)
                if request.is_fork_parent:
                    self._reserved_seats -= request.sampling_params.n - 1
            else:
                self.waiting.remove(request)
            if request.is_fork_parent:
                self._reserved_ids.difference_update(self._child_ids(request))
            request.status = status
            self._release(request)
            outputs.append(
                EngineCoreOutput(
                    req_id=target,
                    new_token_ids=[],
                    finish_reason=request.finish_reason,
                    num_cached_tokens=max(0, request.num_cached_tokens),
                    parent_req_id=request.parent_request_id,
                    index=request.index,
                    error=error,
                )
            )
        return outputs

    def _end_beam_search(self, group: BeamGroup, status: RequestStatus, error: str | None) -> list[EngineCoreOutput]:
        num_cached = max(0, group.members[0].num_cached_tokens) if group.members else 0
        for beam in group.members:
            if beam.status is RequestStatus.RUNNING:
                self.running.remove(beam)
            else:
                self.waiting.remove(beam)
            beam.status = status
            self._release(beam)
        del self._beams[group.request_id]
        self._reserved_ids.difference_update(group.stream_ids())
        reason = group.members[0].finish_reason if group.members else None
        return group.ended(reason or FinishReason.ABORT, num_cached, error)

    # ---- stats ------------------------------------------------------------------------------------------
    def _take_stats(
        self, scheduler_output: SchedulerOutput, num_prompt_tokens: int, num_generated: int
    ) -> SchedulerStats:
        stats = SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=self.kv.usage,
            num_preemptions=self._step_preemptions,
            prefix_cache_queries=self.kv.prefix_queries - self._reported_queries,
            prefix_cache_hits=self.kv.prefix_hits - self._reported_hits,
            num_scheduled_tokens=scheduler_output.total_num_scheduled_tokens,
            num_prompt_tokens=num_prompt_tokens,
            num_generation_tokens=num_generated,
            max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
        )
        self._step_preemptions = 0
        self._reported_queries, self._reported_hits = self.kv.prefix_queries, self.kv.prefix_hits
        return stats

    def reset_prefix_cache(self) -> bool:
        return self.kv.reset_prefix_cache()
