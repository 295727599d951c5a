"""What limits the autoscaling target on the diurnal+bursts trace: the figures behind docs/autoscaling.md's analysis.

Same simulator, traces and policies as ``bench_autoscaling.py``; three things it does not print:

* **SLO-safe throughput of one pod**: constant loads on 4 pods, per-pod rate against KV usage, TTFT p95 / p99 and
  the share of requests within the SLO (how much the KV target leaves unused against the TTFT objective).
* **The oracle of the present, swept**: the per-pod rate it sizes for, alone, held 300 s after each scale-up (as a
  flap-free policy must be), and sized for the next 90 s (foresight): attainment and replica-hours per seed
  against KPA's, the target's best baseline.
* **Where the misses and the replica-hours go** for ``paged`` and KPA: misses in the first two minutes of each
  burst, the rest of it, the five minutes after and elsewhere; ready pods at each burst's start; replica-hours as
  the instant oracle's, pods starting, pods above the need within ten minutes of a burst and elsewhere, and time
  under the need.

    python benchmarks/bench_autoscaling_limits.py [--seeds 3] [--slo 2.0]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter
from dataclasses import replace

import bench_autoscaling as bench
from fleet_sim import workload
from fleet_sim.fleet import RunRecord, run
from fleet_sim.scalers import PresentOracle
from fleet_sim.scoring import score

#: Minutes after a burst's end whose surplus pods count as the burst's (the down-window and the step-down).
AFTER_BURST_S = 600.0


def slo_safe_throughput(slo_s: float) -> None:
    print("\n### one pod at constant load (4 pods, 15 min, the first 2 discarded)\n")
    print("| requests/s per pod | KV usage | TTFT p95 / p99 (s) | TTFT ≤ SLO |")
    print("|---|---|---|---|")
    for tenth in range(40, 76, 4):
        rate = tenth / 10
        probe = bench._Probe()
        reqs = workload.generate(lambda t, r=rate * 4: r, 900, lengths=workload.MODERATE_LENGTHS, seed=7)
        record = run(reqs, probe, duration_s=900, replicas=4, budgets=bench.BUDGETS, model=bench.MODEL)
        record = replace(record, requests=[r for r in record.requests if r.spec.arrival > 120])
        ttfts = sorted(r.first_token_at - r.spec.arrival for r in record.requests if r.first_token_at is not None)
        p95, p99 = (ttfts[math.ceil(q * len(ttfts)) - 1] for q in (0.95, 0.99))
        s = score(record, ttft_slo_s=slo_s)
        kv = statistics.fmean(probe.kv[8:])
        print(f"| {rate:.1f} | {kv:.2f} | {p95:.2f} / {p99:.2f} | {s.slo_attainment:.1%} |")


def oracle_sweep(trace: bench.Trace, point: bench.OperatingPoint, seeds: int, slo_s: float) -> None:
    kpa = bench.policies(trace, slo_s, point)["kpa-concurrency"]
    baseline = [bench.evaluate(trace, kpa(), slo_s, seed=seed)[1] for seed in range(seeds)]
    print(f"\n### the oracle of the present on {trace.name}, against KPA\n")
    cells = " | ".join(f"seed {i}: TTFT ≤ SLO / replica-hours (× KPA) / flaps" for i in range(seeds))
    print(f"| oracle | {cells} |\n|---|" + "---|" * seeds)
    print(
        "| kpa-concurrency | "
        + " | ".join(f"{s.slo_attainment:.1%} / {s.replica_hours:.2f} / {s.flaps}" for s in baseline)
        + " |"
    )
    variants = [(f"{per_pod:.2f}/s per pod", per_pod, 0.0, 0.0) for per_pod in (4.0, 4.4, point.rate, 5.3, 5.7)]
    variants += [(f"{p:.2f}/s, held 300 s after a scale-up", p, 300.0, 0.0) for p in (point.rate, 5.3)]
    variants += [("5.70/s, sized for the next 90 s", 5.7, 0.0, 90.0)]
    for label, per_pod, hold, lead in variants:
        row = []
        for seed, kpa_score in enumerate(baseline):
            oracle = PresentOracle(
                trace.profile,
                per_pod=per_pod,
                min_replicas=bench.MIN_REPLICAS,
                max_replicas=bench.MAX_REPLICAS,
                hold_after_up_s=hold,
                lead_s=lead,
            )
            s = bench.evaluate(trace, oracle, slo_s, seed=seed)[1]
            ratio = s.replica_hours / kpa_score.replica_hours
            row.append(f"{s.slo_attainment:.1%} / {s.replica_hours:.2f} ({ratio:.2f}×) / {s.flaps}")
        print(f"| {label} | " + " | ".join(row) + " |")


def _part(t: float, bursts: list[tuple[float, float]]) -> str:
    """Which part of the trace an arrival at ``t`` falls in."""
    for start, end in bursts:
        if start <= t < start + 120:
            return "onset"
        if start + 120 <= t < end:
            return "rest"
        if end <= t < end + 300:
            return "after"
    return "elsewhere"


def breakdown(record: RunRecord, trace: bench.Trace, point: bench.OperatingPoint, slo_s: float) -> str:
    bursts = [(start, start + length) for start, length, _ in bench.diurnal_bursts()]
    missed = Counter(
        _part(r.spec.arrival, bursts)
        for r in record.requests
        if r.aborted or r.first_token_at is None or r.first_token_at - r.spec.arrival > slo_s
    )
    ready = []
    for start, _ in bursts:
        at = min(record.timeline, key=lambda p: abs(p.time - (start - 5)))
        ready.append(str(at.ready))
    starting = above_burst = above_other = under = 0.0
    previous = 0.0
    for p in record.timeline:
        dt, previous = p.time - previous, p.time
        need = math.ceil(trace.profile(p.time) / point.rate - 1e-9)
        starting += (p.replicas - p.ready) * dt
        extra = p.ready - need
        near = any(a <= p.time < b + AFTER_BURST_S for a, b in bursts)
        if extra > 0 and near:
            above_burst += extra * dt
        elif extra > 0:
            above_other += extra * dt
        else:
            under -= extra * dt
    k = {part: f"{missed[part] / 1000:.1f} k" for part in ("onset", "rest", "after", "elsewhere")}
    hours = [x / 3600 for x in (starting, above_burst, above_other, under)]
    return (
        f"{k['onset']} / {k['rest']} / {k['after']} / {k['elsewhere']} | {', '.join(ready)} | "
        f"{hours[0]:.2f} / {hours[1]:.2f} / {hours[2]:.2f} / −{hours[3]:.2f}"
    )


def where(trace: bench.Trace, point: bench.OperatingPoint, seeds: int, slo_s: float) -> None:
    makers = bench.policies(trace, slo_s, point)
    print(f"\n### where the misses and replica-hours go on {trace.name}\n")
    print(
        "Misses: first two minutes of the bursts / rest of them / five minutes after / elsewhere.\n"
        f"Replica-hours beyond the instant oracle's {bench.oracle_replica_hours(trace, point):.2f}: pods starting / "
        f"ready above the need within {AFTER_BURST_S / 60:.0f} min of a burst / above it elsewhere / under it.\n"
    )
    print("| policy | seed | misses | ready at the bursts' starts | replica-hours |\n|---|---|---|---|---|")
    for name in ("paged", "kpa-concurrency"):
        for seed in range(seeds):
            record, _ = bench.evaluate(trace, makers[name](), slo_s, seed=seed)
            print(f"| {name} | {seed} | {breakdown(record, trace, point, slo_s)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slo", type=float, default=2.0, help="TTFT objective in seconds")
    parser.add_argument("--seeds", type=int, default=3, help="arrival draws (seeds 0..N-1)")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    trace = bench.traces(quick=False)[0]
    point = bench.operating_point(trace.lengths)
    print(f"one pod on target (KV {bench.TARGET_KV}) serves {point.rate:.2f} requests/s")
    slo_safe_throughput(args.slo)
    oracle_sweep(trace, point, args.seeds, args.slo)
    where(trace, point, args.seeds, args.slo)


if __name__ == "__main__":
    main()
