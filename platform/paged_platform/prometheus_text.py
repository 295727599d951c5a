"""Prometheus' data as every paged reader sees it: exposition text parsed into typed samples, classic histograms
built from their ``_bucket`` series, and ``histogram_quantile`` as PromQL computes it.

One implementation for the operator, the router, ``paged-ctl`` and the benchmarks, so that a p95 in ``paged-ctl
top``, in the operator's status and on a Grafana panel is the same number. Which series exist is the metric
contract in ``metric_names``; this module knows no metric name.

Invariants: ``parse`` returns the samples in the order of the text, names and labels as written, values as
floats; text that is not the exposition format raises ``MetricsError`` (a ``ValueError``), never anything
else. A ``Histogram`` always has strictly increasing bucket bounds ending at +Inf.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: The metric name at the start of a sample line (comments and blank lines do not match).
_NAME = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


class MetricsError(ValueError):
    """Metrics that cannot be used: text that is not the exposition format, a histogram that is not one, or (for
    the readers) a series they need that is missing or out of range."""


@dataclass(frozen=True)
class Sample:
    """One sample line: the series' full name (``x_bucket``, ``x_total``), its labels and its value."""

    name: str
    labels: Mapping[str, str]
    value: float


def parse(text: str, *, names: Collection[str] | None = None) -> list[Sample]:
    """The samples of an exposition page.

    ``names``: only the samples of these series, and only their lines are parsed. An engine's page is mostly
    histogram buckets, so a reader of two gauges (the router, every second per replica) skips the rest; a
    malformed line of another series then goes unnoticed. Without it the whole page is checked.
    """
    if names is not None:
        kept = [line for line in text.split("\n") if (m := _NAME.match(line)) is not None and m.group(1) in names]
        text = "\n".join(kept) + "\n"
    try:
        return [
            Sample(s.name, s.labels, float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsError(f"unparseable metrics exposition: {exc}") from exc


def bucket_bound(name: str, labels: Mapping[str, str]) -> float:
    """The upper bound (``le``) of a histogram bucket series."""
    if "le" not in labels:
        raise MetricsError(f"histogram bucket {name} without an 'le' label")
    try:
        bound = float(labels["le"])
    except ValueError as exc:
        raise MetricsError(f"histogram bucket {name} has a non-numeric le={labels['le']!r}") from exc
    if math.isnan(bound):
        raise MetricsError(f"histogram bucket {name} has le=NaN")
    return bound


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: ``(upper_bound, cumulative_count)`` pairs, sorted, ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.buckets or not math.isinf(self.buckets[-1][0]):
            raise MetricsError(f"histogram needs a +Inf bucket, got bounds {[b for b, _ in self.buckets]}")
        bounds = [b for b, _ in self.buckets]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise MetricsError(f"histogram bucket bounds must be strictly increasing, got {bounds}")

    @classmethod
    def from_counts(cls, per_bound: Mapping[float, float]) -> Histogram:
        """From cumulative counts keyed by upper bound, in any order."""
        return cls(tuple(sorted(per_bound.items())))

    @property
    def count(self) -> float:
        return self.buckets[-1][1]

    def minus(self, earlier: Histogram) -> Histogram:
        """Bucket increases since ``earlier``; a reset (any bucket went down) means the pod restarted."""
        if [b for b, _ in earlier.buckets] != [b for b, _ in self.buckets]:
            raise MetricsError("cannot subtract histograms with different bucket bounds")
        if any(now < before for (_, now), (_, before) in zip(self.buckets, earlier.buckets, strict=True)):
            return self
        return Histogram(
            tuple((b, now - before) for (b, now), (_, before) in zip(self.buckets, earlier.buckets, strict=True))
        )

    def plus(self, other: Histogram) -> Histogram:
        if [b for b, _ in other.buckets] != [b for b, _ in self.buckets]:
            raise MetricsError("cannot add histograms with different bucket bounds")
        return Histogram(tuple((b, x + y) for (b, x), (_, y) in zip(self.buckets, other.buckets, strict=True)))


def histogram_of(samples: Iterable[Sample], name: str) -> Histogram | None:
    """The histogram ``name`` from its ``name_bucket`` samples, summed over label sets (per bound); None without
    any bucket."""
    per_bound: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket":
            bound = bucket_bound(s.name, s.labels)
            per_bound[bound] = per_bound.get(bound, 0.0) + s.value
    return Histogram.from_counts(per_bound) if per_bound else None


def histogram_quantile(q: float, hist: Histogram) -> float | None:
    """The ``q``-quantile of ``hist`` as PromQL's ``histogram_quantile`` computes it on a classic histogram.

    Prometheus' rules, kept: linear interpolation inside the bucket where the rank ``q × count`` falls; the lowest
    bucket interpolates from 0 when its bound is positive and answers its bound when it is not; a rank in the +Inf
    bucket answers the highest finite bound (the best lower estimate: nothing is known above it); cumulative counts
    that go down (inconsistent data) are raised to the largest count below them first.

    Where Prometheus answers NaN or ±Inf there is no number to act on, so: no observations, or no finite bucket
    (only +Inf) → None; ``q`` outside [0, 1] or NaN → ValueError, since that is a caller's bug, not data. One
    deliberate difference: at ``q = 0`` Prometheus lands on the lowest bucket even when it is empty and divides
    0 by 0 (NaN); here the rank is looked for among the buckets holding observations, so ``q = 0`` answers the
    lower bound of the first bucket with one: the limit of Prometheus' own answer as ``q`` goes to 0, and the
    same for every ``q > 0``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    buckets = _monotonic(hist.buckets)
    total = buckets[-1][1]
    if not total > 0 or len(buckets) < 2:
        return None
    rank = q * total
    finite = buckets[:-1]
    found = next((i for i, (_, count) in enumerate(finite) if count >= rank and count > 0), None)
    if found is None:
        return finite[-1][0]
    bound, count = finite[found]
    if found == 0 and bound <= 0:
        return bound
    start, below = finite[found - 1] if found > 0 else (0.0, 0.0)
    return start + (bound - start) * (rank - below) / (count - below)


def _monotonic(buckets: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """Each cumulative count at least the largest one below it (Prometheus' ``ensureMonotonic``)."""
    out, highest = [], -math.inf
    for bound, count in buckets:
        highest = max(highest, count)
        out.append((bound, highest))
    return tuple(out)
