"""``paged-ctl bench``: parse options, build the dataset, run the load, print the table, write JSON."""

from __future__ import annotations

import asyncio
import datetime
import enum
import math
import platform
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from paged_platform.bench import report
from paged_platform.bench.datasets import (
    BenchRequest,
    Tokenizer,
    random_dataset,
    shared_prefix_dataset,
    sharegpt_like_dataset,
)
from paged_platform.bench.load import LoadConfig, run_load
from paged_platform.bench.stats import SLO, summarize


class Dataset(enum.StrEnum):
    RANDOM = "random"
    SHARED_PREFIX = "shared-prefix"
    SHAREGPT_LIKE = "sharegpt-like"


class EndpointKind(enum.StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"


class BenchError(Exception):
    """A bad option or an unreachable server: one red line, exit code 2."""


def load_local_tokenizer(path: str) -> Tokenizer:
    """The engine's tokenizer loader, imported only when asked for: paged-ctl itself must not need torch."""
    try:
        from paged_engine.tokenizer import load_tokenizer
    except ImportError as exc:
        raise BenchError(f"--tokenizer needs the engine package (pip install 'paged[engine]'): {exc}") from None
    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot load tokenizer from {path}: {exc}") from None


def discover_model(base_url: str, api_key: str | None) -> str:
    """The first model the server lists under ``/v1/models``."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/v1/models", headers=headers, timeout=30)
        response.raise_for_status()
        models = response.json().get("data") or []
    except (httpx.HTTPError, ValueError) as exc:
        raise BenchError(f"cannot list models at {base_url}/v1/models (pass --model): {exc}") from None
    if not models:
        raise BenchError(f"{base_url}/v1/models lists no model (pass --model)")
    return str(models[0]["id"])


def build_dataset(
    dataset: Dataset,
    num_prompts: int,
    tokenizer: Tokenizer | None,
    seed: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    num_prefixes: int,
    prefix_len: int,
    max_input_len: int | None,
    max_output_len: int | None,
) -> list[BenchRequest]:
    if dataset is Dataset.RANDOM:
        return random_dataset(num_prompts, input_len, output_len, range_ratio, tokenizer, seed)
    if dataset is Dataset.SHARED_PREFIX:
        return shared_prefix_dataset(num_prompts, num_prefixes, prefix_len, input_len, output_len, tokenizer, seed)
    return sharegpt_like_dataset(num_prompts, tokenizer, max_input_len, max_output_len, seed)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server root (OpenAI API under /v1).")] = (
        "http://127.0.0.1:8000"
    ),
    model: Annotated[str | None, typer.Option(help="Model name (default: the first in /v1/models).")] = None,
    endpoint: Annotated[EndpointKind, typer.Option(help="API to call.")] = EndpointKind.COMPLETIONS,
    api_key: Annotated[str | None, typer.Option(envvar="PAGED_API_KEY", help="Bearer token.")] = None,
    dataset: Annotated[Dataset, typer.Option(help="Workload.")] = Dataset.RANDOM,
    num_prompts: Annotated[int, typer.Option(help="Requests to send (the run's first bound).")] = 100,
    input_len: Annotated[
        int, typer.Option(help="Prompt tokens (random); question tokens after the prefix (shared-prefix).")
    ] = 256,
    output_len: Annotated[int, typer.Option(help="Output tokens per request (random, shared-prefix).")] = 128,
    range_ratio: Annotated[float, typer.Option(help="random: lengths uniform in len*(1 +- ratio).")] = 0.0,
    num_prefixes: Annotated[int, typer.Option(help="shared-prefix: distinct system prompts.")] = 4,
    prefix_len: Annotated[int, typer.Option(help="shared-prefix: tokens per system prompt.")] = 512,
    max_input_len: Annotated[int | None, typer.Option(help="sharegpt-like: clip prompt lengths.")] = None,
    max_output_len: Annotated[int | None, typer.Option(help="sharegpt-like: clip output lengths.")] = None,
    request_rate: Annotated[float, typer.Option(help="Requests/s; inf sends all at once.")] = math.inf,
    burstiness: Annotated[float, typer.Option(help="Gamma shape of arrival gaps: 1 = Poisson, <1 burstier.")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="Most requests in flight at once.")] = None,
    max_duration: Annotated[
        float | None, typer.Option(help="Seconds; at this bound in-flight requests are cancelled.")
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 600.0,
    tokenizer: Annotated[
        str | None, typer.Option(help="Local tokenizer (HF folder or .gguf) for exact prompt lengths.")
    ] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO: TTFT at most this (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO: TPOT at most this (ms).")] = None,
    slo_e2el_ms: Annotated[float | None, typer.Option(help="Goodput SLO: end-to-end latency at most (ms).")] = None,
    ignore_eos: Annotated[bool, typer.Option(help="Ask the server for exactly the output length.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the dataset and the arrival process.")] = 0,
    result_json: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
) -> None:
    """Benchmark an OpenAI-compatible server: TTFT, TPOT, ITL, latency percentiles, throughput, SLO goodput."""
    console, err = Console(), Console(stderr=True)
    try:
        summary_ok = _bench(locals(), console, err)
    except (BenchError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if not summary_ok:
        raise typer.Exit(1)


def _bench(opts: dict[str, Any], console: Console, err: Console) -> bool:
    """The command's body; returns whether any request succeeded."""
    slo = SLO(_seconds(opts["slo_ttft_ms"]), _seconds(opts["slo_tpot_ms"]), _seconds(opts["slo_e2el_ms"]))
    tok = load_local_tokenizer(opts["tokenizer"]) if opts["tokenizer"] else None
    requests = build_dataset(
        opts["dataset"], opts["num_prompts"], tok, opts["seed"], opts["input_len"], opts["output_len"],
        opts["range_ratio"], opts["num_prefixes"], opts["prefix_len"], opts["max_input_len"], opts["max_output_len"],
    )  # fmt: skip
    model = opts["model"] or discover_model(opts["base_url"], opts["api_key"])
    config = LoadConfig(
        base_url=opts["base_url"], model=model, endpoint=opts["endpoint"].value, request_rate=opts["request_rate"],
        burstiness=opts["burstiness"], max_concurrency=opts["max_concurrency"], max_duration=opts["max_duration"],
        request_timeout=opts["request_timeout"], api_key=opts["api_key"], ignore_eos=opts["ignore_eos"],
        seed=opts["seed"],
    )  # fmt: skip
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    bar = Progress(
        TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=not opts["progress"], transient=True,
    )  # fmt: skip
    with bar:
        task = bar.add_task("requests", total=len(requests))
        run = asyncio.run(run_load(config, requests, tok, on_result=lambda _: bar.advance(task)))
    summary = summarize(run.results, run.duration, slo, cancelled=run.cancelled)
    report.render(summary, console)
    if opts["result_json"] is not None:
        metadata = {
            "date": started,
            "base_url": opts["base_url"],
            "model": model,
            "endpoint": config.endpoint,
            "dataset": opts["dataset"].value,
            "num_prompts": opts["num_prompts"],
            "request_rate": None if math.isinf(opts["request_rate"]) else opts["request_rate"],
            "burstiness": opts["burstiness"],
            "max_concurrency": opts["max_concurrency"],
            "max_duration": opts["max_duration"],
            "slo_ms": {"ttft": opts["slo_ttft_ms"], "tpot": opts["slo_tpot_ms"], "e2el": opts["slo_e2el_ms"]},
            "tokenizer": opts["tokenizer"],
            "seed": opts["seed"],
            "client_host": platform.node(),
        }
        report.write_json(opts["result_json"], summary, metadata)
    return summary.completed > 0
