"""Offline throughput: paged engine vs Hugging Face transformers ``generate()`` on the same prompts.

Workload (defaults): Gemma 3 270M, fp32, 64 requests x 256 distinct prompt tokens cut from real English text
(the docstrings of Python's standard library), 128 greedy output tokens each with EOS ignored. Each side
runs in its own subprocess so peak memory (max RSS) is measured per side.

    python benchmarks/bench_offline.py                  # full workload, both sides
    python benchmarks/bench_offline.py -n 16 --skip-hf  # quick engine-only run
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import subprocess
import sys
import time

# Well-documented standard-library modules without import side effects.
STDLIB_TEXT_MODULES = (
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "codecs",
    "collections",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "doctest",
    "email",
    "enum",
    "fractions",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "imaplib",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "mailbox",
    "multiprocessing",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pickle",
    "pkgutil",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shutil",
    "signal",
    "smtplib",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "xml.dom",
    "zipfile",
    "zoneinfo",
)


def corpus() -> str:
    """Real English text available offline: the docstrings of standard-library modules and their members."""
    parts = []
    for name in STDLIB_TEXT_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        for obj in [module, *vars(module).values()]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 200 and doc not in parts:
                parts.append(doc)
    return "\n\n".join(parts)


def make_prompts(tokenizer, num_requests: int, prompt_len: int) -> list[list[int]]:
    """``num_requests`` distinct windows of ``prompt_len`` tokens, spread over the corpus."""
    ids = tokenizer.encode(corpus(), add_special_tokens=False)
    if len(ids) < num_requests * prompt_len:
        raise SystemExit(f"corpus has {len(ids)} tokens, need {num_requests * prompt_len}")
    stride = len(ids) // num_requests
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    return [bos + ids[i * stride : i * stride + prompt_len - len(bos)] for i in range(num_requests)]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_engine(args: argparse.Namespace) -> dict:
    from paged_engine import LLM, SamplingParams

    llm = LLM(
        args.model,
        num_threads=args.threads,
        max_num_seqs=args.num_requests,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.prompt_len + args.output_len + 16,
        kv_cache_memory=args.kv_cache_memory,
        attention_backend=args.attention_backend,
        gemm_backend=args.gemm_backend,
        dtype=args.dtype,
    )
    prompts = make_prompts(llm.tokenizer, args.num_requests, args.prompt_len)
    params = lambda n: SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)  # noqa: E731
    llm.generate(prompts[:2], params(4))  # warm-up: first-call allocations
    start, cpu_start = time.perf_counter(), time.process_time()
    outputs = llm.generate(prompts, params(args.output_len))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    from paged_engine.kernels.cpu_isa import describe_cpu

    return {"elapsed": elapsed, "cpu_s": cpu, "output_tokens": generated, "prompt_tokens": sum(map(len, prompts)),
            "cpu": describe_cpu()}  # fmt: skip


def run_hf(args: argparse.Namespace) -> dict:
    import torch
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer import load_tokenizer
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    folder = resolve_model(args.model, write_tokenizer=write_gguf_tokenizer_folder)
    prompts = make_prompts(load_tokenizer(folder), args.num_requests, args.prompt_len)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).eval()
    model.generation_config.eos_token_id = None
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        model.generate(ids[:2], max_new_tokens=4, do_sample=False, pad_token_id=0)
        start, cpu_start = time.perf_counter(), time.process_time()
        out = model.generate(ids, max_new_tokens=args.output_len, do_sample=False, pad_token_id=0)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    generated = (out.shape[1] - ids.shape[1]) * out.shape[0]
    return {"elapsed": elapsed, "cpu_s": cpu, "output_tokens": int(generated), "prompt_tokens": int(ids.numel())}


def child(args: argparse.Namespace) -> None:
    result = run_engine(args) if args.side == "engine" else run_hf(args)
    result["peak_rss_mib"] = peak_rss_mib()
    print("RESULT " + json.dumps(result), flush=True)


def spawn(side: str, argv: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, *argv, "--side", side], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise SystemExit(f"{side} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload and engine flags this script and the side-by-side one share."""
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: Gemma 3 270M)")
    parser.add_argument("-n", "--num-requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-memory", type=int, default=2 << 30, help="bytes")
    parser.add_argument("--attention-backend", default="auto")
    parser.add_argument("--gemm-backend", default="auto", help="auto, packed or torch (dense F.linear)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="every side's dtype")
    parser.add_argument("--skip-hf", action="store_true")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_arguments(parser)
    parser.add_argument("--side", choices=["engine", "hf"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        child(args)
        return
    argv = [a for a in sys.argv[1:] if a != "--skip-hf"]
    results = {"paged": spawn("engine", argv)}
    if not args.skip_hf:
        results["transformers"] = spawn("hf", argv)
    print(
        f"workload: {args.num_requests} requests x {args.prompt_len} prompt tokens x {args.output_len} output "
        f"tokens, greedy, {args.dtype}, {args.threads} threads\nmachine: {results['paged']['cpu']}"
    )
    # CPU seconds are printed too: on a shared machine the wall time also measures the neighbours. "per 2 CPU-s"
    # is the throughput the run would have had with both cores to itself (cache contention aside).
    header = f"{'engine':<14}{'wall s':>8}{'CPU s':>8}{'output tok/s':>14}{'total tok/s':>13}"
    print(header + f"{'out tok/2 CPU-s':>17}{'peak RSS MiB':>14}")
    for name, r in results.items():
        total = r["output_tokens"] + r["prompt_tokens"]
        per_cpu = r["output_tokens"] / (r["cpu_s"] / args.threads)
        print(
            f"{name:<14}{r['elapsed']:>8.1f}{r['cpu_s']:>8.1f}{r['output_tokens'] / r['elapsed']:>14.1f}"
            f"{total / r['elapsed']:>13.1f}{per_cpu:>17.1f}{r['peak_rss_mib']:>14.0f}"
        )
    if "transformers" in results:
        paged, hf = results["paged"], results["transformers"]
        wall_ratio = (paged["output_tokens"] / paged["elapsed"]) / (hf["output_tokens"] / hf["elapsed"])
        cpu_ratio = (paged["output_tokens"] / paged["cpu_s"]) / (hf["output_tokens"] / hf["cpu_s"])
        print(f"output throughput ratio paged / transformers: {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x per CPU-second")


if __name__ == "__main__":
    main()
