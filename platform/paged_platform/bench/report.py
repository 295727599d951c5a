"""Presenting a run: a rich table for people and a JSON document for scripts (same figures in both)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from paged_platform.bench.stats import Summary

METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))


def _clean(value: Any) -> Any:
    """NaN (an empty distribution) is not JSON: write it as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def to_json(summary: Summary, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": metadata, **_clean(dataclasses.asdict(summary))}


def write_json(path: Path, summary: Summary, metadata: dict[str, Any]) -> None:
    path.write_text(json.dumps(to_json(summary, metadata), indent=2) + "\n")


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.1f}"


def render(summary: Summary, console: Console) -> None:
    head = Table(title="Serving benchmark", show_header=False, title_justify="left")
    head.add_column(justify="left")
    head.add_column(justify="right")
    rows = [
        ("Successful requests", f"{summary.completed}"),
        ("Failed requests", f"{summary.failed}"),
        ("Cancelled or not sent (time bound)", f"{summary.cancelled}"),
        ("Duration (s)", f"{summary.duration:.2f}"),
        ("Prompt tokens", f"{summary.prompt_tokens:,}"),
        ("Output tokens", f"{summary.output_tokens:,}"),
        ("Request throughput (req/s)", f"{summary.request_throughput:.2f}"),
        ("Output token throughput (tok/s)", f"{summary.output_throughput:.1f}"),
        ("Total token throughput (tok/s)", f"{summary.total_token_throughput:.1f}"),
    ]
    if summary.goodput is not None:
        rows.append(("Goodput (req/s meeting SLOs)", f"{summary.goodput:.2f} ({summary.good_requests} requests)"))
    for label, value in rows:
        head.add_row(label, value)
    console.print(head)
    latency = Table(title="Latency (ms)", title_justify="left")
    for column in ("metric", "count", "mean", "median", "p90", "p99"):
        latency.add_column(column, justify="left" if column == "metric" else "right")
    for key, label in METRICS:
        dist = getattr(summary, key)
        latency.add_row(label, str(dist.count), _ms(dist.mean), _ms(dist.median), _ms(dist.p90), _ms(dist.p99))
    console.print(latency)
    if summary.errors:
        errors = Table(title="Errors", title_justify="left")
        errors.add_column("error")
        errors.add_column("count", justify="right")
        for error, count in sorted(summary.errors.items()):
            errors.add_row(error, str(count))
        console.print(errors)
