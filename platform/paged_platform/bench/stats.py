"""Pure statistics over finished requests: latency percentiles, throughput and goodput under SLOs.

Kept free of I/O and clocks so a known synthetic timeline gives exactly known figures (tests/bench).
All times are seconds in; the summary reports latencies in milliseconds, as serving benchmarks do.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class RequestResult:
    """What one request did, as seen by the client. ``itl`` are the gaps between content chunks after the first."""

    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: tuple[float, ...] = ()
    error: str = ""

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first; undefined for a single output token."""
        if self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True)
class SLO:
    """Service-level objectives in seconds; a request is *good* when it meets every one that is set."""

    ttft: float | None = None
    tpot: float | None = None
    e2el: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft", "tpot", "e2el"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"SLO {name} must be > 0 seconds, got {value}")

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft, self.tpot, self.e2el))

    def met_by(self, result: RequestResult) -> bool:
        if not result.ok:
            return False
        if self.ttft is not None and result.ttft > self.ttft:
            return False
        tpot = result.tpot
        if self.tpot is not None and tpot is not None and tpot > self.tpot:
            return False
        return not (self.e2el is not None and result.latency > self.e2el)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile with linear interpolation between closest ranks (numpy's default method)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    """Mean, median, p90, p99 (and count) of one latency metric, in milliseconds."""

    count: int
    mean: float
    median: float
    p90: float
    p99: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Distribution:
        ms = [s * 1000.0 for s in seconds]
        mean = sum(ms) / len(ms) if ms else math.nan
        p50, p90, p99 = (percentile(ms, q) for q in PERCENTILES)
        return cls(len(ms), mean, p50, p90, p99)


@dataclass(frozen=True)
class Summary:
    """Everything a benchmark run reports; ``duration`` is from the first send to the last completion."""

    completed: int
    failed: int
    cancelled: int
    duration: float
    prompt_tokens: int
    output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    goodput: float | None
    good_requests: int | None
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    errors: dict[str, int] = field(default_factory=dict)


def summarize(results: Sequence[RequestResult], duration: float, slo: SLO | None = None, cancelled: int = 0) -> Summary:
    """Aggregate finished requests over a run of ``duration`` seconds; failed requests count only as errors."""
    if duration <= 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    output_tokens = sum(r.output_tokens for r in ok)
    good = sum(1 for r in ok if slo.met_by(r)) if slo is not None and slo.is_set else None
    return Summary(
        completed=len(ok),
        failed=len(failed),
        cancelled=cancelled,
        duration=duration,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        request_throughput=len(ok) / duration,
        output_throughput=output_tokens / duration,
        total_token_throughput=(prompt_tokens + output_tokens) / duration,
        goodput=None if good is None else good / duration,
        good_requests=good,
        ttft=Distribution.of([r.ttft for r in ok]),
        tpot=Distribution.of([t for r in ok if (t := r.tpot) is not None]),
        itl=Distribution.of([gap for r in ok for gap in r.itl]),
        e2el=Distribution.of([r.latency for r in ok]),
        errors=dict(Counter(r.error for r in failed)),
    )
