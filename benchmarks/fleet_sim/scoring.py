"""Figures of one simulated run: what users got (TTFT-SLO attainment) and what it cost (replica-hours, churn).

* **SLO attainment**: share of *all* requests that got their first token within the SLO; requests
  that were aborted (client timeout, no endpoint, dropped by a removed pod) count as misses.
* **Replica-hours**: pod lifetime from creation to removal, start-up and drain included.
* **Scale events**: changes of the Deployment's replica count.
* **Flaps**: scale events that reverse the previous one within ``flap_window_s`` (a scale-down
  undone by a scale-up shortly after, or the reverse). An up-then-down after a burst is a flap only
  if the burst is shorter than the window, which the baselines' own 300 s stabilisation excludes.
* **Throughput**: completed requests and output tokens per second over the run.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .fleet import RunRecord

FLAP_WINDOW_S = 300.0


@dataclass(frozen=True)
class Score:
    requests: int
    slo_attainment: float
    ttft_p50_s: float
    ttft_p99_s: float
    aborted: int
    replica_hours: float
    scale_events: int
    flaps: int
    preemptions: int
    completed_per_s: float
    output_tokens_per_s: float


def flaps(events: list[tuple[float, int, int]], window_s: float = FLAP_WINDOW_S) -> int:
    count = 0
    for (t_a, a_from, a_to), (t_b, b_from, b_to) in itertools.pairwise(events):
        if (a_to > a_from) != (b_to > b_from) and t_b - t_a < window_s:
            count += 1
    return count


def score(record: RunRecord, *, ttft_slo_s: float) -> Score:
    ttfts = sorted(
        r.first_token_at - r.spec.arrival for r in record.requests if r.first_token_at is not None and not r.aborted
    )
    met = sum(1 for t in ttfts if t <= ttft_slo_s)
    done = [r for r in record.requests if r.finished_at is not None and not r.aborted]
    n = len(record.requests)
    return Score(
        requests=n,
        slo_attainment=met / n if n else math.nan,
        ttft_p50_s=_quantile(ttfts, 0.5),
        ttft_p99_s=_quantile(ttfts, 0.99),
        aborted=sum(r.aborted for r in record.requests),
        replica_hours=record.pod_seconds / 3600.0,
        scale_events=len(record.scale_events),
        flaps=flaps(record.scale_events),
        preemptions=record.preemptions,
        completed_per_s=len(done) / record.duration_s,
        output_tokens_per_s=sum(r.spec.output_tokens for r in done) / record.duration_s,
    )


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
