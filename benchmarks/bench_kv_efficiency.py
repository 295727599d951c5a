"""KV-memory efficiency: paged blocks vs contiguous per-request reservations, for one request-length distribution.

The PagedAttention paper's comparison, with our real ``Scheduler`` and ``KVCacheManager`` (a simulated model:
one token per request per step, no torch). Every system gets the same KV budget in token slots and the same
requests, all queued at time 0, and runs them to completion in steps (a step computes each running request's
next token; prefill is one step). Measured at every step:

- live share: token slots holding a live token (KV written or being written this step) / slots allocated;
- running: sequences running at once (the batch the model would see), over all steps and over the
  saturated steps (requests still waiting: memory is the limit), which is the figure to compare.

Contiguous systems reserve one slab per request at admission and hold it until the request ends, as
Orca-style servers do: ``max`` reserves ``max_model_len``; ``pow2`` the next power of two of prompt + output
(capped at max_model_len); ``oracle`` exactly prompt + output (knows the output length in advance, which no
real server does). Paged allocates a block when the last one is full; out of blocks it preempts (recompute).

Prefix caching is off (requests share nothing here); one full-attention group (the paper's setting).

    python benchmarks/bench_kv_efficiency.py                       # ShareGPT-like lengths (bundled)
    python benchmarks/bench_kv_efficiency.py --dataset random --input-len 512 --output-len 128
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from paged_engine.core import KVCacheConfig, Request, Scheduler, SchedulerConfig
from paged_engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from paged_engine.sampling_params import SamplingParams
from paged_platform.bench.datasets import sharegpt_lengths
from paged_platform.engine_contract.budgets import MAX_NUM_SEQS_BOUNDS


@dataclass
class Trace:
    """Per-step figures of one system over the whole workload."""

    live: list[int] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    saturated: list[int] = field(default_factory=list)  # running, at steps where requests were still waiting
    preemptions: int = 0

    def record(self, live: int, allocated: int, running: int, waiting: bool) -> None:
        self.live.append(live)
        self.allocated.append(allocated)
        self.running.append(running)
        if waiting:
            self.saturated.append(running)

    @property
    def steps(self) -> int:
        return len(self.running)

    @property
    def live_share(self) -> float:
        """Time-averaged: sum of live slots over sum of allocated slots, across steps."""
        return sum(self.live) / sum(self.allocated)


def workload(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(prompt, output) lengths, each capped so prompt + output <= max_model_len."""
    rng = random.Random(args.seed)
    if args.dataset == "sharegpt-like":
        inputs, outputs = sharegpt_lengths()
        pairs = [(rng.choice(inputs), rng.choice(outputs)) for _ in range(args.num_requests)]
    else:
        lo, hi = 1 - args.range_ratio, 1 + args.range_ratio
        pairs = [
            (rng.randint(round(args.input_len * lo), round(args.input_len * hi)),
             rng.randint(max(1, round(args.output_len * lo)), round(args.output_len * hi)))
            for _ in range(args.num_requests)
        ]  # fmt: skip
    capped = []
    for prompt, output in pairs:
        prompt = min(prompt, args.max_model_len - 1)
        capped.append((prompt, min(output, args.max_model_len - prompt)))
    return capped


def run_paged(pairs: list[tuple[int, int]], args: argparse.Namespace) -> Trace:
    num_blocks = args.budget_tokens // args.block_size + 1  # + the null block
    config = SchedulerConfig(
        max_num_batched_tokens=max(args.max_model_len, 16384),
        max_num_seqs=min(len(pairs), MAX_NUM_SEQS_BOUNDS.high),  # the KV budget binds long before
        max_model_len=args.max_model_len,
        enable_prefix_caching=False,
    )
    scheduler = Scheduler(config, KVCacheConfig.single_group(num_blocks, args.block_size))
    rng = random.Random(args.seed)
    for index, (prompt, output) in enumerate(pairs):
        tokens = [rng.randrange(32000) for _ in range(prompt)]
        scheduler.add_request(Request(f"r{index}", tokens, SamplingParams(max_tokens=output, ignore_eos=True)))
    trace = Trace()
    while scheduler.has_unfinished_requests():
        out: SchedulerOutput = scheduler.schedule()
        # schedule() has already advanced num_computed_tokens over this step's tokens.
        live = sum(scheduler.requests[r].num_computed_tokens for r in out.num_scheduled_tokens)
        used = scheduler.kv.pool.num_used_blocks * args.block_size
        trace.record(live, used, len(out.num_scheduled_tokens), scheduler.num_waiting > 0)
        sampled = {}
        for req_id in out.num_scheduled_tokens:
            request = scheduler.requests[req_id]
            if request.num_computed_tokens == request.num_tokens:
                sampled[req_id] = [7]
        _, stats = scheduler.update_from_output(out, ModelRunnerOutput(sampled_token_ids=sampled))
        trace.preemptions += stats.num_preemptions
    return trace


def run_contiguous(pairs: list[tuple[int, int]], budget: int, reserve: Callable[[int, int], int]) -> Trace:
    """FCFS admission while the next request's slab fits; a slab is held until its request finishes."""
    waiting = list(pairs)
    running: list[list[int]] = []  # [prompt, output, generated, reserved]
    reserved = 0
    trace = Trace()
    while waiting or running:
        while waiting and reserved + reserve(*waiting[0]) <= budget:
            prompt, output = waiting.pop(0)
            slab = reserve(prompt, output)
            running.append([prompt, output, 0, slab])
            reserved += slab
        if not running:
            raise SystemExit(f"a request needs {reserve(*waiting[0])} slots, more than the budget {budget}")
        # Tokens in KV after this step: the prompt (prefill step) or prompt + generated so far.
        trace.record(sum(r[0] + r[2] for r in running), reserved, len(running), bool(waiting))
        for r in running:
            r[2] += 1
        reserved -= sum(r[3] for r in running if r[2] == r[1])
        running = [r for r in running if r[2] < r[1]]
    return trace


def saturated(trace: Trace) -> float:
    """Mean running while requests waited (NaN if the budget held everyone from the start)."""
    return statistics.fmean(trace.saturated) if trace.saturated else float("nan")


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["sharegpt-like", "random"], default="sharegpt-like")
    parser.add_argument("-n", "--num-requests", type=int, default=1000)
    parser.add_argument("--input-len", type=int, default=512, help="random: mean prompt tokens")
    parser.add_argument("--output-len", type=int, default=128, help="random: mean output tokens")
    parser.add_argument("--range-ratio", type=float, default=0.5, help="random: lengths uniform in len*(1 +- r)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--budget-tokens", type=int, default=32768, help="KV budget in token slots (all systems)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.budget_tokens < args.max_model_len:
        parser.error(f"--budget-tokens ({args.budget_tokens}) must hold one max-length request ({args.max_model_len})")
    pairs = workload(args)
    cap = args.max_model_len
    traces = {
        "paged": run_paged(pairs, args),
        "contiguous max": run_contiguous(pairs, args.budget_tokens, lambda p, o: cap),
        "contiguous pow2": run_contiguous(pairs, args.budget_tokens, lambda p, o: min(cap, next_pow2(p + o))),
        "contiguous oracle": run_contiguous(pairs, args.budget_tokens, lambda p, o: p + o),
    }
    prompts, outputs = zip(*pairs, strict=True)
    print(
        f"workload: {len(pairs)} requests ({args.dataset}), prompt mean {statistics.fmean(prompts):.0f} "
        f"tokens, output mean {statistics.fmean(outputs):.0f}; max_model_len {cap}; KV budget "
        f"{args.budget_tokens} token slots; block size {args.block_size}"
    )
    print(
        f"{'system':<19}{'live share':>11}{'running (saturated)':>21}{'running (all)':>15}{'max running':>13}"
        f"{'steps':>8}{'preempt':>9}"
    )
    for name, t in traces.items():
        print(
            f"{name:<19}{t.live_share:>10.1%}{saturated(t):>21.1f}{statistics.fmean(t.running):>15.1f}"
            f"{max(t.running):>13}{t.steps:>8}{t.preemptions:>9}"
        )
    paged = traces["paged"]
    for name in ("contiguous max", "contiguous pow2", "contiguous oracle"):
        t = traces[name]
        print(
            f"paged / {name}: running while saturated {saturated(paged) / saturated(t):.2f}x, "
            f"live share {paged.live_share / t.live_share:.2f}x, steps to finish {t.steps / paged.steps:.2f}x fewer"
        )


if __name__ == "__main__":
    main()
