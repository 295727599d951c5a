"""``paged-router``: its policies in front of three engines, and its own overhead against a trivial upstream.

**Policies.** Three ``paged-engine serve`` processes on loopback serve a small random Gemma 3 (the real Gemma
tokenizer, so prompts are real text; all-global attention; sized so that prefill, not the 262k-entry LM head,
dominates a request). Each policy runs in turn, against freshly started engines (cold caches, the same
dataset): the shared-prefix workload of ``paged-ctl bench`` (``--num-prefixes`` system prompts, each shared by
an equal share of the requests, plus a distinct question), sent at a fixed concurrency. The engines' KV cache
is sized to hold about a third of all the system prompts at once, as a fleet whose prompts outgrow one
replica's cache: a policy that spreads each prefix over every replica makes each of them cycle through all the
prefixes (LRU misses), one that keeps a prefix on one replica lets each hold its share. The prefix count is
coprime with 3 so that round robin does not line prefixes up with replicas by accident.

Figures per policy (round robin first and again last, to show how much the shared machine drifted meanwhile;
ratios are against the first): throughput, TTFT p50/p99 (the ``paged-ctl bench`` load generator), each engine's prefix
hit rate (``paged_prefix_cache_hits_total / queries_total`` over the run) and the load imbalance (the most
requests one engine finished over the mean).

**Overhead.** A trivial HTTP upstream (raw asyncio, a fixed small JSON answer) measured directly and through the
router, with the same client: the added latency at concurrency 1 (p50/p99 of via-router minus direct) and the
proxied requests/s at ``--overhead-concurrency``. Client, router and upstream share the machine's cores, so the
requests/s is a floor for the router on a core of its own.

    python benchmarks/bench_router.py                       # both parts
    python benchmarks/bench_router.py --part overhead
    python benchmarks/bench_router.py --part policies --policies cache_aware,round_robin --num-requests 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from paged_platform.bench.datasets import shared_prefix_dataset
from paged_platform.bench.load import LoadConfig, run_load
from paged_platform.bench.stats import percentile, summarize
from paged_platform.router.policies import POLICY_NAMES

MODEL = "bench-router-model"
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


# ---- the model ----


def build_model(folder: Path, hidden: int, layers: int) -> Path:
    """A random Gemma 3 with the real tokenizer, all layers global (no sliding window), fp32 safetensors."""
    import torch
    import transformers as tf
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    if (folder / "config.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    real = resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (real / name).is_file():
            shutil.copy(real / name, folder / name)
    config = tf.Gemma3TextConfig(
        vocab_size=262144, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, sliding_window=4096, max_position_embeddings=4096,
        layer_types=["full_attention"] * layers, query_pre_attn_scalar=64, bos_token_id=2, eos_token_id=1,
        pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = tf.Gemma3ForCausalLM(config)
    model.config.architectures = ["Gemma3ForCausalLM"]
    model.save_pretrained(folder, safe_serialization=True)
    return folder


# ---- processes ----


@contextlib.contextmanager
def started_all(
    specs: list[tuple[str, list[str], str]], timeout: float, env: dict[str, str] | None = None
) -> Iterator[list[str]]:
    """Start the ``(name, command, url)`` processes together, wait until each ``url/ready`` answers 200, yield
    the URLs; then SIGTERM them all (SIGKILL after 30 s)."""
    procs, logs = [], []
    for name, command, _ in specs:
        log = Path(tempfile.gettempdir()) / f"bench-router-{name}.log"
        with log.open("wb") as out:
            procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                          env=env or os.environ.copy(), start_new_session=True))  # fmt: skip
        logs.append(log)
    try:
        deadline = time.monotonic() + timeout
        for (name, _, url), proc, log in zip(specs, procs, logs, strict=True):
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited with {proc.returncode}; log {log}:\n{log.read_text()[-3000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name} not ready within {timeout:.0f} s; log {log}")
                time.sleep(0.3)
        yield [url for _, _, url in specs]
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@contextlib.contextmanager
def started(name: str, command: list[str], url: str, timeout: float) -> Iterator[str]:
    with started_all([(name, command, url)], timeout) as (ready,):
        yield ready


def engine_command(folder: Path, port: int, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "paged_engine.cli", "serve", str(folder), "--port", str(port),
        "--served-model-name", MODEL, "--dtype", "float32", "--max-model-len", "2048",
        "--kv-cache-memory", args.kv_cache_memory, "--block-size", "16", "--max-num-seqs", "16",
        "--max-num-batched-tokens", "2048", "--log-level", "warning",
    ]  # fmt: skip


def router_command(port: int, endpoints: list[str], policy: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "paged_platform.router", "--port", str(port), "--policy", policy,
        "--probe-interval", "0.5", "--log-level", "warning", *(a for e in endpoints for a in ("--endpoint", e)),
        *extra,
    ]  # fmt: skip


def counters(url: str) -> dict[str, float]:
    """Prefix queries/hits (tokens) and finished requests, summed over label sets."""
    wanted = {"paged_prefix_cache_queries_total": "queries", "paged_prefix_cache_hits_total": "hits",
              "paged_request_success_total": "finished"}  # fmt: skip
    out = dict.fromkeys(wanted.values(), 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            out[wanted[name]] += float(line.rsplit(" ", 1)[-1])
    return out


# ---- part 1: policies ----


def run_policy(policy: str, folder: Path, requests: list, tokenizer: object, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    specs = [
        (f"engine-{i}", engine_command(folder, p, args), u) for i, (p, u) in enumerate(zip(ports, urls, strict=True))
    ]
    with started_all(specs, 900, env):
        before = {u: counters(u) for u in urls}
        rport = free_port()
        with started(
            f"router-{policy}", router_command(rport, urls, policy), f"http://127.0.0.1:{rport}", 60
        ) as router:
            config = LoadConfig(base_url=router, model=MODEL, max_concurrency=args.concurrency, max_duration=900)
            run = asyncio.run(run_load(config, requests, tokenizer))  # type: ignore[arg-type]
        after = {u: counters(u) for u in urls}
    summary = summarize(run.results, run.duration, cancelled=run.cancelled)
    per_engine = []
    for u in urls:
        queries = after[u]["queries"] - before[u]["queries"]
        hits = after[u]["hits"] - before[u]["hits"]
        per_engine.append({"requests": after[u]["finished"] - before[u]["finished"],
                           "hit_rate": hits / queries if queries else 0.0})  # fmt: skip
    loads = [e["requests"] for e in per_engine]
    mean = sum(loads) / len(loads)
    return {
        "completed": summary.completed, "failed": summary.failed, "req_s": summary.request_throughput,
        "tok_s": summary.total_token_throughput, "ttft_p50": summary.ttft.median, "ttft_p99": summary.ttft.p99,
        "engines": per_engine, "imbalance": max(loads) / mean if mean else float("nan"), "errors": summary.errors,
    }  # fmt: skip


def part_policies(args: argparse.Namespace) -> None:
    from paged_engine.tokenizer import load_tokenizer

    default_dir = Path(tempfile.gettempdir()) / f"bench-router-model-h{args.hidden}-l{args.layers}"
    folder = build_model(Path(args.model_dir) if args.model_dir else default_dir, args.hidden, args.layers)
    tokenizer = load_tokenizer(str(folder))
    requests = shared_prefix_dataset(args.num_requests, args.num_prefixes, args.prefix_len, args.suffix_len,
                                     args.output_len, tokenizer, seed=0)  # fmt: skip
    print(f"workload: {args.num_requests} requests, {args.num_prefixes} prefixes x {args.prefix_len} tokens + "
          f"{args.suffix_len}-token question, {args.output_len} output tokens, concurrency {args.concurrency}; "
          f"engines: 3 x (hidden {args.hidden}, {args.layers} layers, KV {args.kv_cache_memory}, block 16)",
          flush=True)  # fmt: skip
    results = {}
    for policy in args.policies.split(","):
        label = policy if policy not in results else f"{policy} (again)"  # a baseline repeated shows the drift
        print(f"== {label}", flush=True)
        results[label] = run_policy(policy, folder, requests, tokenizer, args)
        r = results[label]
        print(f"   {r['completed']} ok / {r['failed']} failed {r['errors'] or ''}; {r['req_s']:.3f} req/s; "
              f"TTFT p50 {r['ttft_p50']:.0f} ms", flush=True)  # fmt: skip
    base = results.get("round_robin")
    print("\n| policy | ok/failed | req/s | tok/s | TTFT p50 (ms) | TTFT p99 (ms) | prefix hit per engine | "
          "requests per engine | max/mean | req/s vs RR | TTFT p50 vs RR |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for policy, r in results.items():
        hits = " / ".join(f"{e['hit_rate']:.0%}" for e in r["engines"])
        loads = " / ".join(f"{e['requests']:.0f}" for e in r["engines"])
        vs = (f"{r['req_s'] / base['req_s']:.2f}x | {r['ttft_p50'] / base['ttft_p50']:.2f}x"
              if base else "- | -")  # fmt: skip
        print(f"| {policy} | {r['completed']}/{r['failed']} | {r['req_s']:.3f} | {r['tok_s']:.0f} | "
              f"{r['ttft_p50']:.0f} | {r['ttft_p99']:.0f} | {hits} | {loads} | {r['imbalance']:.2f} | "
              f"{vs} |")  # fmt: skip


# ---- part 2: overhead ----

UPSTREAM = r"""
import asyncio, sys
BODY = b'{"id":"x","object":"text_completion","model":"%s","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}'
METRICS = b'paged_requests_waiting{model_name="%s"} 0\npaged_kv_cache_usage_ratio{model_name="%s"} 0\n'
def answer(body, kind=b"application/json"):
    head = b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\ncontent-length: " + str(len(body)).encode()
    return head + b"\r\n\r\n" + body
class P(asyncio.Protocol):
    def connection_made(self, t): self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0: return
            head = self.buf[:end].lower()
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"): length = int(line.split(b":")[1])
            if len(self.buf) < end + 4 + length: return
            path = head.split(b" ")[1]
            self.buf = self.buf[end + 4 + length:]
            if path == b"/metrics": self.t.write(answer(METRICS, b"text/plain"))
            elif path == b"/ready": self.t.write(answer(b'{"ready":true}'))
            else: self.t.write(answer(BODY))
async def main():
    server = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
try:
    import uvloop; uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


async def _hammer(url: str, total: int, concurrency: int) -> tuple[list[float], float]:
    """``total`` small completions at ``concurrency`` with aiohttp; per-request latencies and the wall time."""
    import aiohttp

    body = {"model": MODEL, "prompt": "hello " * 32, "max_tokens": 1}
    latencies: list[float] = []
    queue = list(range(total))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            while queue:
                queue.pop()
                start = time.perf_counter()
                async with session.post(f"{url}/v1/completions", json=body) as response:
                    await response.read()
                    assert response.status == 200, response.status
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - start


def part_overhead(args: argparse.Namespace) -> None:
    script = Path(tempfile.gettempdir()) / "bench_router_upstream.py"
    script.write_text(UPSTREAM.replace("%s", MODEL))
    up_port, r_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    with (
        started("upstream", [sys.executable, str(script), str(up_port)], upstream, 30),
        started(
            "router-overhead",
            router_command(r_port, [upstream], "cache_aware", "--otel-exporter", args.otel_exporter),
            f"http://127.0.0.1:{r_port}",
            60,
        ) as router,  # fmt: skip
    ):
        asyncio.run(_hammer(router, 500, 8))  # warm-up: connections, code paths
        direct, _ = asyncio.run(_hammer(upstream, args.overhead_requests, 1))
        via, _ = asyncio.run(_hammer(router, args.overhead_requests, 1))
        direct_many, direct_wall = asyncio.run(_hammer(upstream, args.overhead_requests, args.overhead_concurrency))
        via_many, via_wall = asyncio.run(_hammer(router, args.overhead_requests, args.overhead_concurrency))
    ms = 1000.0
    p50 = (percentile(via, 50) - percentile(direct, 50)) * ms
    p99 = (percentile(via, 99) - percentile(direct, 99)) * ms
    print(f"\nrouter overhead ({args.overhead_requests} requests each, policy cache_aware, 32-word prompt, "
          f"tracing {args.otel_exporter}):")  # fmt: skip
    print("| measure | direct | via router | added |\n|---|---:|---:|---:|")
    print(f"| latency p50, concurrency 1 (ms) | {percentile(direct, 50) * ms:.3f} | {percentile(via, 50) * ms:.3f} | "
          f"{p50:.3f} |")  # fmt: skip
    print(f"| latency p99, concurrency 1 (ms) | {percentile(direct, 99) * ms:.3f} | {percentile(via, 99) * ms:.3f} | "
          f"{p99:.3f} |")  # fmt: skip
    print(f"| requests/s, concurrency {args.overhead_concurrency} | {len(direct_many) / direct_wall:.0f} | "
          f"{len(via_many) / via_wall:.0f} | |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "policies", "overhead"), default="all")
    # session is least_load without a session header, and the load generator sends none.
    parser.add_argument("--policies", default="round_robin,cache_aware,prefix,least_load,round_robin",
                        help="run in this order; a repeated one is run again (the machine's drift)")  # fmt: skip
    parser.add_argument("--num-requests", type=int, default=60)
    parser.add_argument("--num-prefixes", type=int, default=10)
    parser.add_argument("--prefix-len", type=int, default=512)
    parser.add_argument("--suffix-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--kv-cache-memory", default="10MiB", help="per engine (about 1/3 of all prefixes)")
    parser.add_argument("--model-dir", help="where the random model is written (default: a temp folder per size)")
    parser.add_argument("--overhead-requests", type=int, default=3000)
    parser.add_argument("--overhead-concurrency", type=int, default=32)
    parser.add_argument(
        "--otel-exporter",
        choices=("off", "console"),
        default="off",
        help="the router's tracing in the overhead part (console: a span per request, to its log)",
    )
    args = parser.parse_args()
    unknown = set(args.policies.split(",")) - set(POLICY_NAMES)
    if unknown:
        parser.error(f"--policies: unknown {', '.join(sorted(unknown))}; choose from {', '.join(POLICY_NAMES)}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.part in ("all", "overhead"):
        part_overhead(args)
    if args.part in ("all", "policies"):
        part_policies(args)


if __name__ == "__main__":
    main()
