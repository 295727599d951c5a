"""Offline throughput side by side: paged vs Hugging Face transformers (static batch) vs vLLM's CPU build.

The paged and transformers sides are ``bench_offline.py``'s (same workload, same prompts, each in its own
subprocess). The vLLM side runs in vLLM's own venv (``--vllm-venv``, default ``~/.cache/paged/vllm-venv``):
this same file is started there with ``--side vllm`` and fed the identical token-id prompts through a JSON
file, so tokenisation cannot differ. Without an importable vLLM the column is skipped with a message.

    python benchmarks/bench_offline_side_by_side.py                   # 64 x 256 prompt x 128 output, fp32
    python benchmarks/bench_offline_side_by_side.py -n 16 --skip-hf   # quicker
    python benchmarks/bench_offline_side_by_side.py --dtype bfloat16  # bf16 on every side
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import bench_offline


def run_vllm_child(args: argparse.Namespace) -> None:
    """Runs inside vLLM's venv: generate from the given token ids, print one RESULT line."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = json.loads(Path(args.prompts).read_text())
    llm = LLM(
        model=args.folder,
        dtype=args.dtype,
        max_model_len=args.prompt_len + args.output_len + 16,
        max_num_seqs=args.num_requests,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    params = lambda n: SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)  # noqa: E731
    llm.generate(token_prompts[:2], params(4), use_tqdm=False)  # warm-up, as the other sides do
    start = time.perf_counter()
    outputs = llm.generate(token_prompts, params(args.output_len), use_tqdm=False)
    elapsed = time.perf_counter() - start
    result = {
        "elapsed": elapsed,
        "output_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
        "prompt_tokens": sum(map(len, prompts)),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print("RESULT " + json.dumps(result), flush=True)


def vllm_side(args: argparse.Namespace) -> dict | None:
    python = args.vllm_venv / "bin" / "python"
    if not python.is_file():
        print(f"skipping vllm: {python} not found (see docs/benchmarks.md#installing-vllms-cpu-build-next-to-paged)")
        return None
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer import load_tokenizer
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    folder = resolve_model(args.model, write_tokenizer=write_gguf_tokenizer_folder)
    prompts = bench_offline.make_prompts(load_tokenizer(folder), args.num_requests, args.prompt_len)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts, f)
    command = [
        str(python), __file__, "--side", "vllm", "--folder", str(folder), "--prompts", f.name,
        "-n", str(args.num_requests), "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens), "--dtype", args.dtype,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_CPU_KVCACHE_SPACE": str(max(1, args.kv_cache_memory >> 30))}  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    os.unlink(f.name)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise SystemExit(f"vllm run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_offline.add_workload_arguments(parser)
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--vllm-venv", type=Path, default=Path("~/.cache/paged/vllm-venv").expanduser())
    parser.add_argument("--side", choices=["vllm"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "vllm":
        run_vllm_child(args)
        return
    offline_argv = [
        "--num-requests", str(args.num_requests), "--prompt-len", str(args.prompt_len),
        "--output-len", str(args.output_len), "--threads", str(args.threads),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens), "--kv-cache-memory", str(args.kv_cache_memory),
        "--attention-backend", args.attention_backend, "--gemm-backend", args.gemm_backend, "--dtype", args.dtype,
    ] + (["--model", args.model] if args.model else [])  # fmt: skip
    results = {"paged": bench_offline.spawn("engine", offline_argv)}
    if not args.skip_hf:
        results["transformers"] = bench_offline.spawn("hf", offline_argv)
    if not args.skip_vllm and (vllm := vllm_side(args)) is not None:
        results["vllm-cpu"] = vllm
    print(
        f"workload: {args.num_requests} requests x {args.prompt_len} prompt tokens x {args.output_len} output "
        f"tokens, greedy, {args.dtype}, {args.threads} threads\nmachine: {results['paged']['cpu']}"
    )
    print(f"{'engine':<14}{'time s':>9}{'output tok/s':>14}{'total tok/s':>13}{'peak RSS MiB':>14}{'paged / this':>14}")
    paged_rate = results["paged"]["output_tokens"] / results["paged"]["elapsed"]
    for name, r in results.items():
        rate = r["output_tokens"] / r["elapsed"]
        total = (r["output_tokens"] + r["prompt_tokens"]) / r["elapsed"]
        print(
            f"{name:<14}{r['elapsed']:>9.1f}{rate:>14.1f}{total:>13.1f}{r['peak_rss_mib']:>14.0f}"
            f"{paged_rate / rate:>13.2f}x"
        )


if __name__ == "__main__":
    main()
