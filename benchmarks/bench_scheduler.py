"""Engine-core overhead: scheduler step time and block-pool throughput, with a simulated model.

The simulated model costs nothing: it returns one token for every request whose scheduled chunk reaches
the end of its tokens, so the figures are the scheduler's own cost per engine step. Requests that finish
are replaced by new ones (sharing a system-prompt prefix), so the running count stays at the target and
steps mix decodes with prefill chunks, prefix hits, frees and block hashing.

    python benchmarks/bench_scheduler.py [--sizes 16 256 1024] [--steps 200] [--hash sha256] [--no-gc]
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import time

from paged_engine.core import KVCacheConfig, Request, Scheduler, SchedulerConfig
from paged_engine.core.block_hash import BlockHasher
from paged_engine.core.block_pool import BlockPool
from paged_engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from paged_engine.sampling_params import SamplingParams

BLOCK_SIZE = 16
# CPU time of this process: on a shared machine, wall time mostly measures the neighbours.
CLOCK = time.process_time_ns
SYSTEM_PROMPT = [random.Random(0).randrange(32000) for _ in range(64)]


def simulated_model(scheduler: Scheduler, out: SchedulerOutput) -> ModelRunnerOutput:
    sampled = {}
    for req_id in out.num_scheduled_tokens:
        request = scheduler.requests[req_id]
        if request.num_computed_tokens == request.num_tokens:
            sampled[req_id] = [(request.num_tokens * 7919 + len(req_id)) % 32000]
    return ModelRunnerOutput(sampled_token_ids=sampled)


class Workload:
    def __init__(self, running: int, hash_algorithm: str, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.count = 0
        max_model_len = 1024
        config = SchedulerConfig(
            max_num_batched_tokens=max(2048, running),
            max_num_seqs=running,
            max_model_len=max_model_len,
            long_prefill_token_threshold=512,
            hash_algorithm=hash_algorithm,
        )
        # Room for every request's longest life: no preemption, the figures are the steady-state cost.
        num_blocks = running * (max_model_len // BLOCK_SIZE) // 2 + 1
        self.scheduler = Scheduler(config, KVCacheConfig.single_group(num_blocks, BLOCK_SIZE))
        for _ in range(running):
            self.add()

    def add(self) -> None:
        tail = [self.rng.randrange(32000) for _ in range(self.rng.randrange(16, 192))]
        params = SamplingParams(max_tokens=self.rng.randrange(32, 256), ignore_eos=True)
        self.scheduler.add_request(Request(f"r{self.count}", SYSTEM_PROMPT + tail, params))
        self.count += 1

    def step(self) -> tuple[int, int, int, int]:
        """One engine step; returns (schedule CPU ns, update CPU ns, wall ns of both, requests scheduled)."""
        w0, t0 = time.perf_counter_ns(), CLOCK()
        out = self.scheduler.schedule()
        w1, t1 = time.perf_counter_ns(), CLOCK()
        runner_output = simulated_model(self.scheduler, out)
        w2, t2 = time.perf_counter_ns(), CLOCK()
        outputs, _ = self.scheduler.update_from_output(out, runner_output)
        w3, t3 = time.perf_counter_ns(), CLOCK()
        for output in outputs:
            if output.finished:
                self.add()
        return t1 - t0, t3 - t2, (w1 - w0) + (w3 - w2), len(out.num_scheduled_tokens)


def bench_scheduler(running: int, steps: int, hash_algorithm: str) -> dict[str, float]:
    workload = Workload(running, hash_algorithm)
    while workload.scheduler.num_running < running:  # admit and prefill everyone first
        workload.step()
    for _ in range(20):
        workload.step()
    schedule_ns = update_ns = wall_ns = scheduled = 0
    for _ in range(steps):
        s, u, w, n = workload.step()
        schedule_ns += s
        update_ns += u
        wall_ns += w
        scheduled += n
    per_step = (schedule_ns + update_ns) / steps / 1000
    return {
        "schedule_us": schedule_ns / steps / 1000,
        "update_us": update_ns / steps / 1000,
        "step_us": per_step,
        "wall_us": wall_ns / steps / 1000,
        "per_request_us": per_step / (scheduled / steps),
        "requests_per_step": scheduled / steps,
    }


def bench_block_pool(running: int, rounds: int) -> dict[str, float]:
    """Pool operations per second for a pool sized for ``running`` requests of 32 blocks: allocate one block
    per request, free it (uncached: to the front), and hit a cached free block (removed from the middle)."""
    pool = BlockPool(running * 32 + 1)
    held = pool.get_new_blocks(running * 16)
    for index, block in enumerate(held):
        pool.cache_block(block, index, 0)
    pool.free_blocks(reversed(held))  # cached, in LRU order, behind the never-used blocks
    ops = 0
    t0 = CLOCK()
    for r in range(rounds):
        fresh = pool.get_new_blocks(running)
        pool.free_blocks(fresh)
        hits = [pool.get_cached_block((r * running + i) % len(held), 0) for i in range(running)]
        pool.touch(hits)
        pool.free_blocks(hits)
        ops += 4 * running
    elapsed = (CLOCK() - t0) / 1e9
    return {"ops_per_s": ops / elapsed}


def bench_hashing(algorithm: str, blocks: int = 20000) -> float:
    """Full blocks hashed per second (one 16-token block per call, chained)."""
    hasher = BlockHasher(BLOCK_SIZE, algorithm)
    request = Request("h", [random.Random(1).randrange(32000) for _ in range(BLOCK_SIZE * blocks)], SamplingParams())
    t0 = CLOCK()
    request.attach_block_hasher(hasher)
    return blocks / ((CLOCK() - t0) / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hash", default="sha256", choices=["sha256", "builtin"])
    parser.add_argument(
        "--no-gc", action="store_true", help="disable the cyclic GC, whose passes grow with the live request count"
    )
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()

    print(
        f"python {platform.python_version()} on {platform.machine()}, block size {BLOCK_SIZE}, "
        f"hash {args.hash}, gc {'off' if args.no_gc else 'on'}"
    )
    print("CPU time per engine step (scheduler only; the simulated model is excluded), wall time for reference")
    header = f"{'running':>8} {'schedule µs':>12} {'update µs':>10} {'step µs':>9} {'µs/request':>11} {'wall µs':>9}"
    print(f"{header} {'pool ops/s':>12}")
    for running in args.sizes:
        s = bench_scheduler(running, args.steps, args.hash)
        p = bench_block_pool(running, rounds=max(10, 20000 // running))
        print(
            f"{running:>8} {s['schedule_us']:>12.1f} {s['update_us']:>10.1f} {s['step_us']:>9.1f} "
            f"{s['per_request_us']:>11.2f} {s['wall_us']:>9.1f} {p['ops_per_s']:>12,.0f}"
        )
    for algorithm in ("sha256", "builtin"):
        print(f"block hashing ({algorithm}): {bench_hashing(algorithm):,.0f} blocks/s")


if __name__ == "__main__":
    main()
