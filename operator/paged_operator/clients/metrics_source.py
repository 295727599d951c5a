"""Metrics collection (I/O): scrape engine pods directly, or ask a Prometheus server, behind one interface.

A decision must never wait on the slowest pod: every pod gets its own short timeout, all pods are
asked at once, and a pod that times out, refuses or answers garbage becomes a *failure* entry
instead of an exception. The policies then decide on the pods that answered (see ``fleet_view``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from paged_platform.prometheus_text import MetricsError

from paged_operator.policy.engine_series import (
    HISTOGRAM_SERIES,
    SCALAR_SERIES,
    add_series,
    parse_exposition,
    sample_from_series,
)
from paged_operator.policy.fleet_view import EngineSample

Clock = Callable[[], float]
# Kubernetes pod names are DNS subdomains; anything else cannot be safely put into a PromQL regex.
_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class PodTarget:
    """A ready engine pod and its metrics URL (``http://<pod-ip>:<port>/metrics``)."""

    name: str
    url: str


@dataclass(frozen=True)
class ScrapeResult:
    """One collection round: samples of the pods that answered, and pod → error for those that did not."""

    time: float
    samples: tuple[EngineSample, ...]
    failures: Mapping[str, str] = field(default_factory=dict)


class MetricsSource(Protocol):
    async def collect(self, pods: Sequence[PodTarget]) -> ScrapeResult: ...


class PodScraper:
    """Scrapes each pod's ``/metrics`` concurrently with a per-pod timeout."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout_s: float = 2.0,
        model_name: str | None = None,
        clock: Clock = time.time,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"scrape timeout must be positive, got {timeout_s} s")
        self._client = client
        self._timeout_s = timeout_s
        self._model_name = model_name
        self._clock = clock

    async def collect(self, pods: Sequence[PodTarget]) -> ScrapeResult:
        outcomes = await asyncio.gather(*(self._scrape(pod) for pod in pods))
        samples = tuple(o for o in outcomes if isinstance(o, EngineSample))
        failures = {pod.name: o for pod, o in zip(pods, outcomes, strict=True) if isinstance(o, str)}
        return ScrapeResult(time=self._clock(), samples=samples, failures=failures)

    async def _scrape(self, pod: PodTarget) -> EngineSample | str:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.get(pod.url, timeout=self._timeout_s)
            response.raise_for_status()
            return parse_exposition(response.text, pod=pod.name, time=self._clock(), model_name=self._model_name)
        except TimeoutError:
            return f"no answer within {self._timeout_s:g} s"
        except httpx.HTTPStatusError as exc:
            return f"HTTP {exc.response.status_code} from {pod.url}"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__} from {pod.url}: {exc}"
        except MetricsError as exc:
            return str(exc)


class PrometheusSource:
    """Reads the same series from a Prometheus server's instant-query API (``/api/v1/query``).

    One query per series name, all at once, selecting ``labels`` plus the ready pods by the
    ``pod_label`` label (what a ``PodMonitor`` attaches). Sample times are Prometheus' evaluation
    times, so counters that were not re-scraped since the last round simply show no increase.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        labels: Mapping[str, str],
        pod_label: str = "pod",
        timeout_s: float = 5.0,
        clock: Clock = time.time,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"query timeout must be positive, got {timeout_s} s")
        for name in (*labels, pod_label):
            if not _LABEL_NAME.match(name):
                raise ValueError(f"invalid Prometheus label name {name!r}")
        self._client = client
        self._url = base_url.rstrip("/") + "/api/v1/query"
        self._labels = dict(labels)
        self._pod_label = pod_label
        self._timeout_s = timeout_s
        self._clock = clock

    def selector(self, pods: Sequence[PodTarget]) -> str:
        """The PromQL label selector for these pods."""
        for pod in pods:
            if not _POD_NAME.match(pod.name):
                raise ValueError(f"pod name {pod.name!r} is not a valid Kubernetes name")
        matchers = [f'{k}="{_escape(v)}"' for k, v in sorted(self._labels.items())]
        pod_re = "|".join(re.escape(pod.name) for pod in pods)
        matchers.append(f'{self._pod_label}=~"{_escape(pod_re)}"')
        return "{" + ",".join(matchers) + "}"

    async def collect(self, pods: Sequence[PodTarget]) -> ScrapeResult:
        if not pods:
            return ScrapeResult(time=self._clock(), samples=())
        selector = self.selector(pods)
        names = [*SCALAR_SERIES, *(f"{h}_bucket" for h in HISTOGRAM_SERIES)]
        try:
            async with asyncio.timeout(self._timeout_s):
                results = await asyncio.gather(*(self._query(name + selector) for name in names))
        except (TimeoutError, httpx.HTTPError, MetricsError) as exc:
            why = f"Prometheus query failed: {str(exc) or type(exc).__name__}"
            return ScrapeResult(time=self._clock(), samples=(), failures={pod.name: why for pod in pods})

        scalars: dict[str, dict[str, float]] = {pod.name: {} for pod in pods}
        buckets: dict[str, dict[str, dict[float, float]]] = {pod.name: {} for pod in pods}
        stamp: dict[str, float] = {}
        failures: dict[str, str] = {}
        try:
            for series in (s for result in results for s in result):
                metric, (ts, value) = series["metric"], series["value"]
                pod = metric.get(self._pod_label)
                if pod in scalars and pod not in failures:
                    try:
                        add_series(scalars[pod], buckets[pod], metric["__name__"], metric, float(value))
                    except MetricsError as exc:  # this pod's series are unusable, the others may be fine
                        failures[pod] = f"pod {pod}: {exc}"
                    stamp[pod] = max(stamp.get(pod, 0.0), float(ts))
        except (KeyError, TypeError, ValueError) as exc:
            why = f"malformed Prometheus answer: {type(exc).__name__}: {exc}"
            return ScrapeResult(time=self._clock(), samples=(), failures={pod.name: why for pod in pods})
        samples: list[EngineSample] = []
        for pod in pods:
            if pod.name in failures:
                continue
            if pod.name not in stamp:
                failures[pod.name] = "no series in Prometheus for this pod"
                continue
            try:
                samples.append(
                    sample_from_series(scalars[pod.name], buckets[pod.name], pod=pod.name, time=stamp[pod.name])
                )
            except MetricsError as exc:
                failures[pod.name] = str(exc)
        return ScrapeResult(time=max(stamp.values(), default=self._clock()), samples=tuple(samples), failures=failures)

    async def _query(self, promql: str) -> list[dict]:
        response = await self._client.get(self._url, params={"query": promql}, timeout=self._timeout_s)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success" or body.get("data", {}).get("resultType") != "vector":
            raise MetricsError(f"unexpected answer to {promql!r}: {str(body)[:200]}")
        return body["data"]["result"]


def _escape(value: str) -> str:
    """Escape a PromQL string literal (backslashes and double quotes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
