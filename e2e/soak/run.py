"""The soak: measure the server's capacity on the mix, then offer it a steady fraction of that for a while.

Phases, each against the same live server:
1. **probe** (closed loop, ``probe_concurrency`` clients, ``probe_s``): requests served per second on the mix.
   It also warms the server (allocator, thread pools), so the baseline below is a steady state.
2. **baseline**: clients gone, the engine idle; RSS, descriptors and threads of every watched process.
3. **soak** (``duration_s``): Poisson arrivals at ``load_factor`` x capacity, at most ``max_concurrency`` in
   flight (an arrival that finds them all busy waits: counted as ``delayed``); RSS sampled throughout.
4. **after**: clients gone, idle again; the same figures, plus the engine's KV usage and queues.

``failures(report)`` states the pass criteria; it is pure, so the criteria are tested on their own.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from e2e.soak.client import Outcome, run_case
from e2e.soak.procfs import ProcSample, open_fds, sample
from e2e.soak.workload import Limits, draw_case

MAX_RSS_GROWTH = 0.05
IDLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SoakConfig:
    base_url: str
    limits: Limits
    pids: dict[str, int]  # watched processes by name (the API server, the engine core)
    duration_s: float = 600.0
    seed: int = 0
    probe_s: float = 20.0
    probe_concurrency: int = 16
    load_factor: float = 0.9
    max_concurrency: int = 32
    sample_every_s: float = 2.0
    api_key: str | None = None
    admin_token: str | None = None
    request_timeout_s: float = 120.0


@dataclass
class Idle:
    """A watched moment with no client connected and nothing running."""

    procs: dict[str, ProcSample]
    fds: dict[str, list[str]]
    engine: dict[str, float]


@dataclass
class SoakReport:
    capacity_rps: float
    offered_rps: float
    duration_s: float
    outcomes: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    unexpected: list[Outcome] = field(default_factory=list)
    delayed: int = 0
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    before: Idle | None = None
    after: Idle | None = None

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def rss_windows(self, name: str) -> tuple[float, float]:
        """Median RSS over the first and the last minute of the soak (halves, when it is shorter)."""
        window = min(60.0, self.duration_s / 2)
        samples = self.rss[name]
        first = [rss for t, rss in samples if t <= window]
        last = [rss for t, rss in samples if t >= self.duration_s - window]
        return statistics.median(first), statistics.median(last)

    def summary(self) -> dict[str, Any]:
        assert self.before is not None and self.after is not None
        rss = {}
        for name in self.rss:
            first, last = self.rss_windows(name)
            rss[name] = {"first_minute_mib": round(first / 2**20, 1), "last_minute_mib": round(last / 2**20, 1),
                         "growth": round(last / first - 1, 4)}  # fmt: skip
        return {
            "capacity_rps": round(self.capacity_rps, 2), "offered_rps": round(self.offered_rps, 2),
            "duration_s": round(self.duration_s, 1), "requests": self.requests,
            "served_rps": round(self.requests / self.duration_s, 2), "delayed_arrivals": self.delayed,
            "outcomes": dict(self.outcomes), "cases": dict(sorted(self.labels.items())),
            "unexpected": [f"{o.kind} {o.label}: {o.detail}" for o in self.unexpected[:20]],
            "rss": rss,
            "procs_before": {n: vars(s) for n, s in self.before.procs.items()},
            "procs_after": {n: vars(s) for n, s in self.after.procs.items()},
            "engine_before": self.before.engine, "engine_after": self.after.engine,
        }  # fmt: skip


def failures(report: SoakReport) -> list[str]:
    """Every pass criterion the run missed (empty: it passed)."""
    assert report.before is not None and report.after is not None
    found = []
    if report.unexpected:
        kinds = Counter(o.kind for o in report.unexpected)
        found.append(f"{len(report.unexpected)} unexpected errors {dict(kinds)}: {report.unexpected[0]}")
    engine = report.after.engine
    for metric in ("paged_kv_cache_usage_ratio", "paged_requests_running", "paged_requests_waiting", "in_flight"):
        if engine[metric] != 0:
            found.append(f"{metric} is {engine[metric]} after the soak, expected 0")
    for name in report.rss:
        first, last = report.rss_windows(name)
        if last > first * (1 + MAX_RSS_GROWTH):
            found.append(f"{name} RSS grew {last / first - 1:.1%} from the first to the last minute "
                         f"({first / 2**20:.1f} -> {last / 2**20:.1f} MiB)")  # fmt: skip
    for name, before in report.before.procs.items():
        after = report.after.procs[name]
        if after.fds > before.fds:
            extra = Counter(report.after.fds[name]) - Counter(report.before.fds[name])
            found.append(f"{name} holds {after.fds - before.fds} more file descriptors: {dict(extra)}")
        if after.threads > before.threads:
            found.append(f"{name} runs {after.threads - before.threads} more threads ({before.threads} before)")
    return found


def scrape(client: httpx.Client) -> dict[str, float]:
    """The engine's queue and KV figures from ``/metrics``, and what the admin API says is in flight."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            if s.name in ("paged_kv_cache_usage_ratio", "paged_requests_running", "paged_requests_waiting",
                          "paged_preemptions_total"):  # fmt: skip
                values[s.name] = s.value
            elif s.name == "paged_request_success_total":
                values[f"finished_{s.labels['finished_reason']}"] = s.value
    values["in_flight"] = client.get("/admin/drain").json()["in_flight"]
    return values


def wait_idle(config: SoakConfig) -> Idle:
    """Waits until nothing runs and every KV block is free (or ``IDLE_TIMEOUT_S``), then takes the figures."""
    headers = {"Authorization": f"Bearer {config.admin_token}"} if config.admin_token else {}
    with httpx.Client(base_url=config.base_url, headers=headers, timeout=30) as client:
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while True:
            engine = scrape(client)
            busy = engine["in_flight"] or engine["paged_requests_running"] or engine["paged_kv_cache_usage_ratio"]
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    time.sleep(1.0)  # the server's side of the closed connections
    procs = {name: sample(pid) for name, pid in config.pids.items()}
    return Idle(procs, {name: open_fds(pid) for name, pid in config.pids.items()}, engine)


def _client(config: SoakConfig, connections: int) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=config.base_url, headers=headers, timeout=config.request_timeout_s,
                             limits=limits)  # fmt: skip


async def measure_capacity(config: SoakConfig) -> float:
    """Requests per second served on the mix by ``probe_concurrency`` clients that never pause."""
    rng = random.Random(config.seed + 1)
    done = 0
    deadline = time.monotonic() + config.probe_s

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await run_case(client, draw_case(rng, config.limits))
            done += 1

    start = time.monotonic()
    async with _client(config, config.probe_concurrency) as client:
        await asyncio.gather(*(worker(client) for _ in range(config.probe_concurrency)))
    return done / (time.monotonic() - start)


async def _soak(config: SoakConfig, report: SoakReport) -> None:
    rng = random.Random(config.seed)
    arrivals = random.Random(config.seed + 2)
    slots = asyncio.Semaphore(config.max_concurrency)
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    report.rss = {name: [] for name in config.pids}

    async def watch() -> None:
        while True:
            for name, pid in config.pids.items():
                report.rss[name].append((time.monotonic() - start, sample(pid).rss_bytes))
            await asyncio.sleep(config.sample_every_s)

    async def one(client: httpx.AsyncClient) -> None:
        case = draw_case(rng, config.limits)
        try:
            outcome = await run_case(client, case)
        finally:
            slots.release()
        report.outcomes[outcome.kind] += 1
        report.labels[case.label] += 1
        if not outcome.expected:
            report.unexpected.append(outcome)

    watcher = asyncio.create_task(watch())
    async with _client(config, config.max_concurrency) as client:
        next_at = start
        while (now := time.monotonic()) < start + config.duration_s:
            if next_at > now:
                await asyncio.sleep(next_at - now)
            if slots.locked():
                report.delayed += 1
            await slots.acquire()
            task = asyncio.create_task(one(client))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += arrivals.expovariate(report.offered_rps)
        await asyncio.gather(*tasks)
    report.duration_s = time.monotonic() - start
    watcher.cancel()


def run_soak(config: SoakConfig) -> SoakReport:
    capacity = asyncio.run(measure_capacity(config))
    report = SoakReport(capacity, capacity * config.load_factor, config.duration_s)
    report.before = wait_idle(config)
    asyncio.run(_soak(config, report))
    report.after = wait_idle(config)
    return report
