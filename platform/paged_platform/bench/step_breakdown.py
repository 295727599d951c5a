"""Where a serving engine's step time went during a benchmark: the difference of ``paged_step_phase_seconds``
between two scrapes of ``/metrics``, as milliseconds per step and shares of the engine core's step.

Engine-core phases (schedule, prepare, model, attention, sample, update) are observed once per step, so their
sums add up to the step; server phases (ipc_decode per step, detokenize per request output, http per streamed
chunk written) run in the API process, concurrently with the next step, and are shown per step for scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from paged_platform.metric_names import STEP_PHASE
from paged_platform.prometheus_text import parse

ENGINE_PHASES = ("schedule", "prepare", "model", "attention", "sample", "update")


def scrape_phases(base_url: str) -> dict[str, tuple[float, float]]:
    """phase -> (sum of seconds, count), summed over model names."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    seconds_sum, count = f"{STEP_PHASE}_sum", f"{STEP_PHASE}_count"
    phases: dict[str, tuple[float, float]] = {}
    for sample in parse(text, names=(seconds_sum, count)):
        seconds, steps = phases.get(sample.labels["phase"], (0.0, 0.0))
        if sample.name == seconds_sum:
            seconds += sample.value
        else:
            steps += sample.value
        phases[sample.labels["phase"]] = (seconds, steps)
    return phases


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    ms_per_step: float
    share: float | None  # of the engine core's step time; None for server phases


def breakdown(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> list[PhaseRow]:
    delta = {p: (after[p][0] - before.get(p, (0.0, 0.0))[0]) for p in after}
    steps = max((after[p][1] - before.get(p, (0.0, 0.0))[1] for p in ENGINE_PHASES if p in after), default=0.0)
    if steps <= 0:
        return []
    engine_total = sum(delta.get(p, 0.0) for p in ENGINE_PHASES)
    rows = [PhaseRow(p, delta[p] / steps * 1e3, delta[p] / engine_total if engine_total else None)
            for p in ENGINE_PHASES if p in delta]  # fmt: skip
    rows += [PhaseRow(p, delta[p] / steps * 1e3, None) for p in sorted(delta) if p not in ENGINE_PHASES]
    return rows


def format_breakdown(rows: list[PhaseRow]) -> str:
    lines = ["| phase | ms per step | share of the core's step |", "|---|---:|---:|"]
    for row in rows:
        share = "" if row.share is None else f"{row.share:.0%}"
        lines.append(f"| {row.phase} | {row.ms_per_step:.2f} | {share} |")
    return "\n".join(lines)
