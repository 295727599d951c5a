"""The request-level simulator behind benchmarks/bench_autoscaling.py: workload, engine model, baselines, scoring,
and the bench's core (a policy on a short trace) with behavioural assertions, never timings."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from paged_operator.policy.autoscaler import AutoscalingPolicySpec
from paged_operator.policy.controller import ControllerSpec
from paged_operator.policy.fleet_view import EngineSample
from paged_platform.engine_contract.budgets import Budgets

from benchmarks.fleet_sim import workload
from benchmarks.fleet_sim.engine_model import EngineModel, Pod, SimRequest
from benchmarks.fleet_sim.fleet import Actuation, Snapshot, run
from benchmarks.fleet_sim.scalers import HpaBehavior, HpaScaler, KedaScaler, KpaScaler, PagedScaler, PresentOracle
from benchmarks.fleet_sim.scoring import flaps, score

LENGTHS = workload.MODERATE_LENGTHS
BUDGETS = Budgets(256, 2048)


class Hold:
    """Never changes anything (a fixed fleet)."""

    name, interval_s = "hold", 15.0

    def observe(self, snapshot: Snapshot) -> Actuation:
        return Actuation()


def snapshot(*, replicas: int, kv: list[float], waiting: list[float] | None = None, t: float = 15.0) -> Snapshot:
    waiting = waiting or [0.0] * len(kv)
    samples = tuple(
        EngineSample(time=t, pod=f"p{i}", kv_usage=k, running=10.0, waiting=w, preemptions_total=0.0)
        for i, (k, w) in enumerate(zip(kv, waiting, strict=True))
    )
    return Snapshot(t, replicas, tuple(s.pod for s in samples), replicas - len(samples), samples)


def test_arrivals_follow_the_profile_and_burstiness() -> None:
    reqs = workload.generate(workload.step(2, 8, 500), 1000, lengths=LENGTHS, burstiness=0.25, seed=3)
    before = sum(r.arrival < 500 for r in reqs) / 500
    after = sum(r.arrival >= 500 for r in reqs) / 500
    assert before == pytest.approx(2, rel=0.2) and after == pytest.approx(8, rel=0.15)
    gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(reqs) if a.arrival >= 500]
    assert statistics.stdev(gaps) / statistics.fmean(gaps) > 1.5  # gamma shape 0.25: CV 2, far from Poisson's 1
    assert all(16 <= r.prompt_tokens <= 4096 and 1 <= r.output_tokens <= 1024 for r in reqs)
    assert reqs == workload.generate(workload.step(2, 8, 500), 1000, lengths=LENGTHS, burstiness=0.25, seed=3)


def test_a_pod_under_capacity_serves_everything_quickly_and_accounts_for_every_request() -> None:
    reqs = workload.generate(lambda t: 3.0, 600, lengths=LENGTHS, seed=1)
    record = run(reqs, Hold(), duration_s=660, replicas=1, budgets=BUDGETS)
    s = score(record, ttft_slo_s=2.0)
    assert s.slo_attainment > 0.99 and s.aborted == 0 and s.preemptions == 0
    assert sum(r.finished_at is not None for r in record.requests) == len(reqs)
    assert all(r.first_token_at >= r.spec.arrival for r in record.requests if r.first_token_at is not None)
    assert s.replica_hours == pytest.approx(660 / 3600)


def test_overcommitted_kv_preempts_and_overload_times_clients_out() -> None:
    model = EngineModel(kv_capacity_tokens=20_000)
    heavy = workload.Lengths(workload.LengthModel(100, 0.3, 16, 512), workload.LengthModel(800, 0.3, 16, 2048))
    reqs = workload.generate(lambda t: 4.0, 300, lengths=heavy, seed=2)
    record = run(reqs, Hold(), duration_s=300, replicas=1, budgets=BUDGETS, model=model)
    assert record.preemptions > 0
    assert sum(r.aborted for r in record.requests) > 0  # far over capacity: queued clients give up after 60 s


def test_pod_kv_accounting_returns_to_zero() -> None:
    pod = Pod("p", EngineModel(), BUDGETS, created_at=-90.0)
    for i in range(50):
        pod.enqueue(SimRequest(workload.RequestSpec(i * 0.1, 500, 50)))
    t = 0.0
    while not pod.idle:
        pod.advance(t, 0.5)
        t += 0.5
    assert pod.finished_total == 50 and pod.kv_used == pytest.approx(0.0, abs=1e-6)


def test_hpa_follows_the_documented_formula() -> None:
    hpa = HpaScaler(HpaBehavior(1, 20), target_kv_usage=0.5)
    assert hpa.observe(snapshot(replicas=4, kv=[0.54] * 4)).replicas == 4  # within the 10 % tolerance
    assert hpa.observe(snapshot(replicas=4, kv=[0.9] * 4, t=30)).replicas == math.ceil(4 * 0.9 / 0.5)
    # Starting pods count as 0 on a scale-up: 4 × 0.9 over 6 pods is 0.6, still above target → ceil(6 × 1.2).
    assert hpa.observe(snapshot(replicas=6, kv=[0.9] * 4, t=45)).replicas == 8
    # Scale-down waits for the 300 s window's largest recommendation.
    downs = [hpa.observe(snapshot(replicas=8, kv=[0.1] * 8, t=60 + 15 * i)).replicas for i in range(22)]
    assert downs[0] == 8 and downs[-1] == 2


def test_keda_sizes_by_total_queue_over_threshold() -> None:
    keda = KedaScaler(HpaBehavior(1, 20))
    assert keda.observe(snapshot(replicas=2, kv=[0.5, 0.5], waiting=[30, 20])).replicas == 6  # rate limit: 2 + 4
    assert keda.observe(snapshot(replicas=6, kv=[0.5] * 6, waiting=[10] * 5 + [0], t=15)).replicas == 10  # 50 / 5
    assert keda.observe(snapshot(replicas=10, kv=[0.5] * 10, waiting=[5] * 10, t=30)).replicas == 10


def test_kpa_panics_at_twice_the_target_and_holds() -> None:
    kpa = KpaScaler(min_replicas=1, max_replicas=20, target_concurrency=10 / 0.7)  # 10 in flight per pod
    calm = [kpa.observe(snapshot(replicas=2, kv=[0.5, 0.5], t=2.0 * i)).replicas for i in range(1, 31)]
    assert set(calm) == {2}  # 2 pods × 10 in flight on a target of 10
    # 2 × 50 in flight: the 6 s panic average reaches 2× the ready pods at once, the stable one much later.
    burst = [kpa.observe(snapshot(replicas=2, kv=[0.5, 0.5], waiting=[40, 40], t=t)).replicas for t in (62, 64, 66)]
    assert burst[0] >= 4 and burst[-1] == 10
    quiet = [kpa.observe(snapshot(replicas=10, kv=[0.1] * 2, t=68.0 + 2 * i)).replicas for i in range(20)]
    assert all(r >= 10 for r in quiet)  # no scale-down in panic


def test_present_oracle_keeps_what_the_true_rate_needs_now_within_the_bounds() -> None:
    oracle = PresentOracle(workload.step(3, 15, 300), per_pod=5.0, min_replicas=1, max_replicas=2)
    assert oracle.observe(snapshot(replicas=1, kv=[0.1], t=100)).replicas == 1  # ceil(3 / 5)
    assert oracle.observe(snapshot(replicas=1, kv=[0.9], t=300)).replicas == 2  # ceil(15 / 5) = 3, at most 2
    with pytest.raises(ValueError, match="per_pod must be positive, got 0"):
        PresentOracle(workload.step(3, 15, 300), per_pod=0, min_replicas=1, max_replicas=2)


def test_present_oracle_holds_a_scale_up_and_looks_ahead_when_asked() -> None:
    burst = workload.diurnal(5, 5, 3600, ((100.0, 60.0, 3.0),))  # 5 requests/s, 15 from t=100 to 160
    held = PresentOracle(burst, per_pod=5.0, min_replicas=1, max_replicas=8, hold_after_up_s=300)
    assert held.observe(snapshot(replicas=1, kv=[0.9], t=100)).replicas == 3
    assert held.observe(snapshot(replicas=3, kv=[0.1] * 3, t=200)).replicas == 3  # burst over, scale-up 100 s ago
    assert held.observe(snapshot(replicas=3, kv=[0.1] * 3, t=400)).replicas == 1
    ahead = PresentOracle(burst, per_pod=5.0, min_replicas=1, max_replicas=8, lead_s=90)
    assert ahead.observe(snapshot(replicas=1, kv=[0.1], t=20)).replicas == 3  # the burst is within 90 s
    assert ahead.observe(snapshot(replicas=1, kv=[0.1], t=5)).replicas == 1


def test_flaps_are_quick_reversals() -> None:
    assert flaps([(0, 1, 3), (100, 3, 2), (1000, 2, 4), (1100, 4, 5)]) == 1
    assert flaps([(0, 1, 3), (400, 3, 2)]) == 0


def test_bench_core_paged_on_a_step_does_not_flap() -> None:
    """The bench's core on a short step: the real controller scales up at once and settles without flapping."""
    spec = ControllerSpec(autoscaling=AutoscalingPolicySpec(max_replicas=12, panic_window_s=30), budget=None)
    trace = workload.generate(workload.step(3, 15, 300), 1500, lengths=LENGTHS, seed=5)
    record = run(trace, PagedScaler(spec, BUDGETS, interval_s=15), duration_s=1500, replicas=1, budgets=BUDGETS)
    s = score(record, ttft_slo_s=2.0)
    assert s.flaps == 0
    first_up = record.scale_events[0]
    assert first_up[0] <= 300 + 30 and first_up[2] > first_up[1]  # the step is seen within two decisions
    downs = [e for e in record.scale_events if e[2] < e[1]]
    # A burst sized on the single saturated pod may be given back, but only after the 300 s down-window.
    assert all(e[0] - first_up[0] >= 300 for e in downs)
    assert 3 <= record.timeline[-1].replicas <= 5  # ~5.5 requests/s per replica on target: 15/s needs 3
    tail = [r for r in record.requests if r.spec.arrival > 900]
    met = sum(r.first_token_at is not None and r.first_token_at - r.spec.arrival <= 2.0 for r in tail)
    assert met / len(tail) > 0.99  # settled: the SLO holds
