"""Tensor parallelism on one CPU host: TP=2 with one thread per rank against TP=1 with two threads, on the offline
workload (bench_offline.py's prompts: real text, greedy, EOS ignored). Prints output tok/s, their ratio, and the
time the ranks spent in collectives (all-reduce and the logits' gather) per step.

    python benchmarks/bench_tensor_parallel.py                 # 64 x 256 in, 128 out, Gemma 3 270M, fp32
    python benchmarks/bench_tensor_parallel.py -n 16 --output-len 32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench_offline import make_prompts


def run(args: argparse.Namespace) -> dict:
    from paged_engine import LLM, SamplingParams
    from paged_engine.kernels.cpu_isa import describe_cpu

    llm = LLM(
        args.model, tensor_parallel_size=args.tp, num_threads=args.threads_per_rank, max_num_seqs=args.num_requests,
        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.prompt_len + args.output_len + 16,
        kv_cache_memory=args.kv_cache_memory, dtype=args.dtype,
    )  # fmt: skip
    prompts = make_prompts(llm.tokenizer, args.num_requests, args.prompt_len)
    greedy = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))  # warm-up
    engine = llm.engine
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, greedy)
    steps, collectives, generated = 0, 0.0, 0
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        for output in engine.step():
            generated += len(output.outputs[0].token_ids) if output.finished else 0
        steps += 1
        collectives += engine.core.last_stats.step_phases.get("all_reduce", 0.0)
    elapsed = time.perf_counter() - start
    llm.shutdown()
    return {"elapsed": elapsed, "steps": steps, "output_tokens": generated, "collective_s": collectives,
            "cpu": describe_cpu()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: Gemma 3 270M)")
    parser.add_argument("-n", "--num-requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-memory", default="2Gi")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--tp", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--threads-per-rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tp is not None:
        print("RESULT " + json.dumps(run(args)), flush=True)
        return
    results = {}
    for tp, threads in ((1, 2), (2, 1)):
        argv = [sys.executable, __file__, *sys.argv[1:], "--tp", str(tp), "--threads-per-rank", str(threads)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise SystemExit(f"TP={tp} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        results[tp] = json.loads(lines[0].removeprefix("RESULT "))
    print(f"workload: {args.num_requests} x {args.prompt_len} prompt tokens, {args.output_len} output tokens, "
          f"greedy, {args.dtype}\nmachine: {results[1]['cpu']}")  # fmt: skip
    print(f"{'run':<26}{'wall s':>8}{'steps':>7}{'output tok/s':>14}{'collectives ms/step':>21}")
    for tp, label in ((1, "TP=1, 2 threads"), (2, "TP=2, 1 thread per rank")):
        r = results[tp]
        print(f"{label:<26}{r['elapsed']:>8.1f}{r['steps']:>7}{r['output_tokens'] / r['elapsed']:>14.1f}"
              f"{1000 * r['collective_s'] / r['steps']:>21.2f}")  # fmt: skip
    ratio = (results[2]["output_tokens"] / results[2]["elapsed"]) / (
        results[1]["output_tokens"] / results[1]["elapsed"]
    )
    print(f"TP=2 / TP=1 output tok/s: {ratio:.2f}x")


if __name__ == "__main__":
    main()
