"""One engine pod at request level: continuous batching, chunked prefill, KV in tokens, recompute preemption.

The pod is advanced in blocks of ``dt`` seconds with a closed form per block instead of one Python
step per engine iteration (hours of traffic on a dozen pods must run in seconds):

* **Admission** (at the block start, first come first served, head-of-line): a waiting request is
  admitted while the running batch is below ``max_num_seqs`` and its context (prompt, plus the
  tokens already generated for a preempted one) fits in the free KV tokens.
* **Prefill** runs in chunks of ``max_num_batched_tokens - decoding`` tokens per step, FIFO; a step
  with a chunk of ``c`` tokens and ``d`` decoding sequences takes
  ``step_base_s + step_per_seq_s × d + prefill_per_token_s × c``. A request's first token comes
  when its last prompt token is computed (interpolated inside the block, so TTFT is not quantised
  to ``dt``; admission still waits for the block start, which costs up to ``dt`` under saturation).
* **Decode**: every decoding sequence gains one token per step (the pod's ``progress`` counter), so a
  request finishes when progress reaches its start plus its remaining output.
* **KV**: prompt tokens are allocated on admission, one token per generated token after. When the
  cache overflows, the newest decoding sequences are preempted (freed, back to the queue's front,
  recomputed on re-admission), as vLLM's recompute preemption does.
* **Clients give up**: a request without a first token after ``queue_timeout_s`` is aborted.

Metrics are exported as ``EngineSample``s with the engine's own TTFT bucket bounds.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from paged_operator.policy.fleet_view import EngineSample
from paged_platform.engine_contract.budgets import Budgets
from paged_platform.prometheus_text import Histogram

from .workload import RequestSpec

#: The engine's TTFT histogram bounds (engine/paged_engine/server/metrics.py), +Inf last.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, math.inf)  # fmt: skip


@dataclass(frozen=True)
class EngineModel:
    """Cost model of one replica (times in seconds, sizes in tokens)."""

    kv_capacity_tokens: int = 98_304
    step_base_s: float = 0.015
    step_per_seq_s: float = 0.0004
    prefill_per_token_s: float = 0.00008
    start_delay_s: float = 90.0
    queue_timeout_s: float = 60.0
    drain_grace_s: float = 30.0


class SimRequest:
    """A request's life; ``first_token_at`` / ``finished_at`` stay None when it never got there."""

    __slots__ = ("aborted", "epoch", "finished_at", "first_token_at", "generated", "spec", "start_progress")

    def __init__(self, spec: RequestSpec) -> None:
        self.spec = spec
        self.generated = 0  # tokens generated before the current admission (preemption keeps them)
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        self.aborted = False
        self.start_progress = 0.0
        self.epoch = 0  # bumped on preemption: stale heap entries are skipped

    @property
    def context(self) -> int:
        return self.spec.prompt_tokens + self.generated


class Pod:
    """One engine replica; ``advance`` runs it for a block of time."""

    def __init__(self, name: str, model: EngineModel, budgets: Budgets, *, created_at: float) -> None:
        self.name = name
        self.model = model
        self.budgets = budgets
        self.created_at = created_at
        self.ready_at = created_at + model.start_delay_s
        self.draining_since: float | None = None
        self.waiting: deque[SimRequest] = deque()
        self.prefill: deque[list] = deque()  # [request, tokens left]
        self.pending_prefill = 0.0
        self.decoding: dict[int, SimRequest] = {}  # insertion order = admission order (newest last)
        self._finish: list[tuple[float, int, int]] = []  # (finish progress, id, epoch)
        self.progress = 0.0
        self.kv_prefill = 0.0
        self._kv_decode_base = 0.0  # Σ (context at decode start − start progress) over decoding requests
        self.preemptions_total = 0
        self.finished_total = 0
        self._ttft_counts = [0] * len(TTFT_BUCKETS)
        self.dropped: list[SimRequest] = []

    # -- state ---------------------------------------------------------------------------------------
    def ready(self, now: float) -> bool:
        return self.ready_at <= now and self.draining_since is None

    @property
    def running(self) -> int:
        return len(self.prefill) + len(self.decoding)

    @property
    def kv_used(self) -> float:
        return self.kv_prefill + self._kv_decode_base + len(self.decoding) * self.progress

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.prefill or self.decoding)

    def in_flight(self) -> int:
        return len(self.waiting) + self.running

    def sample(self, now: float) -> EngineSample:
        cumulative = tuple(itertools.accumulate(self._ttft_counts))
        return EngineSample(
            time=now,
            pod=self.name,
            kv_usage=min(1.0, self.kv_used / self.model.kv_capacity_tokens),
            running=float(self.running),
            waiting=float(len(self.waiting)),
            preemptions_total=float(self.preemptions_total),
            finished_total=float(self.finished_total),
            ttft=Histogram(tuple(zip(TTFT_BUCKETS, map(float, cumulative), strict=True))),
            max_num_seqs=self.budgets.max_num_seqs,
            max_num_batched_tokens=self.budgets.max_num_batched_tokens,
        )

    # -- dynamics ------------------------------------------------------------------------------------
    def enqueue(self, request: SimRequest) -> None:
        self.waiting.append(request)

    def advance(self, t0: float, dt: float) -> None:
        """Run the pod from ``t0`` to ``t0 + dt``."""
        self._abandon(t0)
        self._admit(t0 + dt)
        m = self.model
        decoding = len(self.decoding)
        chunk_cap = max(0, self.budgets.max_num_batched_tokens - decoding)
        p0 = self.progress
        prefill_time, prefill_step = 0.0, 0.0
        if self.pending_prefill > 0 and chunk_cap > 0:
            chunk = min(chunk_cap, self.pending_prefill)
            prefill_step = m.step_base_s + m.step_per_seq_s * decoding + m.prefill_per_token_s * chunk
            rate = chunk / prefill_step
            end = clock = t0
            while self.prefill:
                entry = self.prefill[0]
                request, left = entry
                start = max(clock, request.spec.arrival)
                if start >= t0 + dt:
                    break
                if start + left / rate > t0 + dt:  # still prefilling at the block's end
                    done = (t0 + dt - start) * rate
                    entry[1] -= done
                    self.pending_prefill -= done
                    end = t0 + dt
                    break
                end = clock = start + left / rate
                self.prefill.popleft()
                self.pending_prefill -= left
                self.kv_prefill -= request.context
                self._start_decoding(request, clock, p0 + (clock - t0) / prefill_step)
            prefill_time = end - t0
        p1 = p0 + (prefill_time / prefill_step if prefill_step else 0.0)
        rest = dt - prefill_time
        decoding = len(self.decoding)
        decode_step = m.step_base_s + m.step_per_seq_s * decoding
        p2 = p1 + (rest / decode_step if decoding and rest > 0 else 0.0)
        self.progress = p2

        def time_at(progress: float) -> float:
            if progress <= p1:
                return t0 + (progress - p0) * prefill_step
            return t0 + prefill_time + (progress - p1) * decode_step

        while self._finish and self._finish[0][0] <= p2:
            finish, rid, epoch = heapq.heappop(self._finish)
            request = self.decoding.get(rid)
            if request is None or request.epoch != epoch:
                continue
            self._complete(rid, request, time_at(finish))
        self._preempt_overflow()

    def _start_decoding(self, request: SimRequest, now: float, progress: float) -> None:
        if request.first_token_at is None:
            request.first_token_at = now
            self._ttft_counts[bisect_left(TTFT_BUCKETS, now - request.spec.arrival)] += 1
            request.generated = 1
        remaining = request.spec.output_tokens - request.generated
        rid = id(request)
        request.start_progress = progress
        self.decoding[rid] = request
        self._kv_decode_base += request.context - progress
        if remaining <= 0:
            self._complete(rid, request, now)
            return
        heapq.heappush(self._finish, (progress + remaining, rid, request.epoch))

    def _complete(self, rid: int, request: SimRequest, now: float) -> None:
        del self.decoding[rid]
        self._kv_decode_base -= request.context - request.start_progress
        request.finished_at = now
        self.finished_total += 1

    def _admit(self, until: float) -> None:
        free = self.model.kv_capacity_tokens - self.kv_used
        while self.waiting and self.running < self.budgets.max_num_seqs:
            request = self.waiting[0]
            if request.spec.arrival >= until or request.context > free:
                return
            self.waiting.popleft()
            free -= request.context
            self.kv_prefill += request.context
            self.pending_prefill += request.context
            self.prefill.append([request, float(request.context)])

    def _preempt_overflow(self) -> None:
        while self.decoding and self.kv_used > self.model.kv_capacity_tokens:
            rid = next(reversed(self.decoding))
            request = self.decoding.pop(rid)
            self._kv_decode_base -= request.context - request.start_progress
            request.generated += math.floor(self.progress - request.start_progress)
            request.epoch += 1
            self.preemptions_total += 1
            self.waiting.appendleft(request)

    def _abandon(self, now: float) -> None:
        """Clients without a first token after the timeout give up (preempted ones, at the front, keep waiting)."""
        limit = now - self.model.queue_timeout_s
        i = 0
        while i < len(self.waiting) and self.waiting[i].first_token_at is not None:
            i += 1
        while i < len(self.waiting) and self.waiting[i].spec.arrival < limit:
            request = self.waiting[i]
            del self.waiting[i]
            request.aborted = True

    def drop_all(self) -> None:
        """The pod is gone (grace period over): whatever it still holds fails."""
        for request in [*self.waiting, *(e[0] for e in self.prefill), *self.decoding.values()]:
            request.aborted = True
            self.dropped.append(request)
        self.waiting.clear()
        self.prefill.clear()
        self.decoding.clear()
