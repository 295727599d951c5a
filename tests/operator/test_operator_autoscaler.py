"""Autoscaler policy: signals, stabilisation, panic, credit for starting pods, limits; unit and property tests."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_views import view
from paged_operator.policy.autoscaler import (
    AutoscalerState,
    AutoscalingPolicySpec,
    Recommendation,
    ScaleDecision,
    ScalingLimit,
    arrival_growth,
    compute_signals,
    decide,
    released,
    saturated,
)

SPEC = AutoscalingPolicySpec(
    min_replicas=1,
    max_replicas=10,
    target_kv_usage=0.75,
    target_waiting_per_replica=4,
    target_preemption_rate=0.5,
    stabilization_window_up_s=0,
    stabilization_window_down_s=60,
    max_step_up=4,
    max_step_down=1,
    panic_threshold=2.0,
    panic_window_s=10,
    panic_hold_s=60,
)


def run(spec: AutoscalingPolicySpec, loads: list[dict], *, ready: int, starting: int = 0, dt: float = 5.0):
    """Feed one view per tick with a fixed fleet; returns the decisions."""
    state = AutoscalerState()
    out: list[ScaleDecision] = []
    for i, load in enumerate(loads):
        d, state = decide(spec, state, view(ready=ready, t=i * dt, **load), ready=ready, starting=starting, now=i * dt)
        out.append(d)
    return out


def test_reason_names_the_winning_signal() -> None:
    (d,) = run(SPEC, [{"kv": 0.93}], ready=3)
    assert d.desired == 4
    assert d.reason.startswith("kv_cache_usage 0.93 > target 0.75 on 3 replicas → 4")
    assert {s.name for s in d.signals} == {"kv_cache_usage", "waiting_per_replica", "preemption_rate"}


def test_largest_demand_wins() -> None:
    # Queue above target, arrivals 3x what a replica serves: 2 x 6/2 = 6 plus the backlog drain term.
    (d,) = run(SPEC, [{"kv": 0.8, "waiting": 12, "preempt": 0.1, "arrival": 6.0, "completion": 2.0}], ready=2)
    assert d.reason.startswith("waiting_per_replica 12 > target 4 on 2 replicas → 7")
    assert d.desired == 6 and d.step_limited  # 3.5x capacity is a burst, but still at most +4 per decision
    (d,) = run(SPEC, [{"kv": 0.8, "waiting": 0, "preempt": 1.5}], ready=2)
    assert d.desired == 6 and d.reason.startswith("preemption_rate")


def test_queue_demand_follows_growth_not_length() -> None:
    def demand(**load: float) -> float:
        signals = compute_signals(SPEC, view(ready=4, **load), ready=4)
        return next(s.demand for s in signals if s.name == "waiting_per_replica")

    short = demand(waiting=20, arrival=6.0, completion=4.0)
    long = demand(waiting=200, arrival=6.0, completion=4.0)
    assert short == pytest.approx(4 * 6 / 4 + 16 * 4 / (4 * 120))
    assert long - short == pytest.approx(180 * 4 / (4 * 120))  # only the drain term grows with the backlog
    assert demand(waiting=2, arrival=6.0, completion=4.0) == pytest.approx(4 * 2 / 4)  # below target: the ratio
    assert demand(waiting=50) == 5  # no completions observed yet: one more than ready
    # A backlog stuck on one engine (median pod idle) adds no drain replicas: they could not take it.
    stuck = compute_signals(SPEC, replace(view(ready=4, waiting=50, arrival=4.0, completion=4.0), waiting_median=0), 4)
    assert next(s.demand for s in stuck if s.name == "waiting_per_replica") == pytest.approx(4.0)
    # While pods start, the drain term is left out (credit).
    starting = compute_signals(SPEC, view(ready=4, waiting=200, arrival=6.0, completion=4.0), 4, starting=2)
    assert next(s.demand for s in starting if s.name == "waiting_per_replica") == pytest.approx(6.0)


def test_seq_budget_usage_signal() -> None:
    v = replace(view(ready=3, kv=0.36), seq_budget_usage=1.0)  # the budget caps the batch, KV looks idle
    signals = {s.name: s for s in compute_signals(SPEC, v, 3)}
    assert signals["seq_budget_usage"].demand == pytest.approx(4.0)
    assert signals["kv_cache_usage"].demand == pytest.approx(3 * 0.36 / 0.75)


def test_preemption_and_ttft_demand_are_capped_while_pods_start() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "ttft_p95_slo_s": 0.5})
    v = view(ready=2, preempt=5.0, ttft=3.0)
    for name, free in (("preemption_rate", 20), ("ttft_p95_seconds", 12)):
        assert next(s.demand for s in compute_signals(spec, v, 2) if s.name == name) == free
        assert next(s.demand for s in compute_signals(spec, v, 2, starting=1) if s.name == name) == 3


def test_ttft_signal_only_with_an_slo() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "ttft_p95_slo_s": 0.5})
    signals = compute_signals(spec, view(ready=2, ttft=1.5), ready=2)
    assert [s.demand for s in signals if s.name == "ttft_p95_seconds"] == [pytest.approx(6.0)]
    assert "ttft_p95_seconds" not in {s.name for s in compute_signals(SPEC, view(ready=2, ttft=1.5), ready=2)}
    # A rate not known yet (first sample) is left out rather than read as zero.
    assert "preemption_rate" not in {s.name for s in compute_signals(SPEC, view(preempt=None), ready=2)}


def test_tolerance_band_keeps_current() -> None:
    (d,) = run(SPEC, [{"kv": 0.8}], ready=4)  # demand 4.27 is within 10 % of 4
    assert d.desired == 4 and d.change == 0


def test_scale_down_waits_for_the_down_window() -> None:
    ds = run(SPEC, [{"kv": 0.9}] + [{"kv": 0.2}] * 20, ready=4)  # 5 s ticks, 60 s window
    first_down = next(i for i, d in enumerate(ds) if d.desired < 4)
    assert first_down * 5 >= 60
    assert "down-stabilisation over 60 s holds at" in ds[1].reason
    assert ds[first_down].desired == 3  # one replica per decision


def test_up_window_needs_sustained_demand() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "stabilization_window_up_s": 15})
    ds = run(spec, [{"kv": 0.5}, {"kv": 1.0}, {"kv": 0.5}, {"kv": 1.0}, {"kv": 1.0}, {"kv": 1.0}, {"kv": 1.0}], ready=3)
    assert [d.desired for d in ds] == [3, 3, 3, 3, 3, 4, 4]  # wanted at t=15, 20, 25: the whole window
    assert "up-stabilisation over 15 s holds at 3" in ds[4].reason  # the 0.5 seen at t=10 is still in the window


def test_a_growing_queue_scales_up_without_waiting_for_the_up_window() -> None:
    spec = replace(SPEC, stabilization_window_up_s=30)
    growing = {"kv": 0.9, "waiting": 40, "arrival": 6.0, "completion": 4.0}  # arrivals outrun completions
    assert saturated(spec, view(ready=4, **growing))
    calm = [{"kv": 0.7}] * 7  # 35 s observed: the up-window is known in full (no restart guard)
    d = run(spec, [*calm, growing], ready=4)[-1]
    assert d.desired == 7 and not d.panic  # 4 x 6/4 + 0.3 to drain the backlog; under 2x capacity: no panic
    # A queue that no longer grows, or KV alone, must be wanted for the whole window first.
    steady = {"kv": 0.9, "waiting": 40, "arrival": 4.0, "completion": 4.0}
    assert not saturated(spec, view(ready=4, **steady))
    assert run(spec, [*calm, steady], ready=4)[-1].desired == 4
    assert run(spec, [*calm, {"kv": 1.1}], ready=4)[-1].desired == 4


def test_saturation_may_double_the_fleet_in_one_step() -> None:
    spec = replace(SPEC, max_replicas=40)
    (d,) = run(spec, [{"waiting": 40, "arrival": 12.0, "completion": 4.0}], ready=8)  # demand 24+
    assert d.desired == 16 and d.step_limited and "step limited to +8" in d.reason
    (d,) = run(spec, [{"kv": 0.5, "preempt": 5.0}], ready=8)  # preemptions are no saturation: +4 at most
    assert d.desired == 12 and "step limited to +4" in d.reason


def test_arrival_growth_is_the_least_squares_trend_over_the_horizon() -> None:
    def history(rates: list[float | None], dt: float = 15.0) -> list[Recommendation]:
        return [Recommendation(i * dt, 1.0, 1.0, 1, rate) for i, rate in enumerate(rates)]

    assert arrival_growth(history([10.0 + i for i in range(21)]), 300) == pytest.approx((30 + 20) / 30)
    assert arrival_growth(history([30.0 - i for i in range(21)]), 300) == 1.0  # falling: no growth
    assert arrival_growth(history([10.0] * 21), 300) == 1.0
    assert arrival_growth(history([10.0, 12.0, 14.0]), 300) == 1.0  # 30 s of rates say nothing about 300 s
    assert arrival_growth(history([None] * 18 + [10.0, 11.0, 12.0]), 300) == 1.0


def test_a_scale_down_holds_what_rising_arrivals_will_need_a_down_window_later() -> None:
    def counts(rising: bool) -> list[int]:
        state, ready, out = AutoscalerState(), 6, []
        for i in range(60):  # KV says 1.8 / 0.75 = 2.4 replicas throughout
            t = 5.0 * i
            fleet = 12.0 + (i if rising else 0)  # +1 request/s per tick: +12 a down-window ahead
            v = view(ready=ready, kv=1.8 / ready, arrival=fleet / ready, completion=fleet / ready, t=t)
            d, state = decide(SPEC, state, v, ready=ready, starting=0, now=t)
            ready = d.desired
            out.append(ready)
        return out

    assert counts(rising=False)[-1] == 3  # ceil(2.4 x 1.1)
    held = counts(rising=True)
    assert held[-1] == 4  # ceil(2.4 x growth x 1.1) for the load a down-window ahead
    assert held == sorted(held, reverse=True)  # still only down, one step at a time


def test_released_drops_recommendations_made_at_a_load_no_longer_seen() -> None:
    def rec(t: float, replicas: int, arrivals: float | None) -> Recommendation:
        return Recommendation(t, float(replicas), float(replicas), replicas, arrivals)

    unknown, burst, gap = rec(0, 7, None), rec(15, 9, 60.0), rec(30, 8, None)
    near, after = rec(45, 5, 32.0), [rec(60, 4, 30.0), rec(75, 4, 29.5)]
    window = [unknown, burst, gap, near, *after]
    # 32 is within 10 % of the release window's 30: still seen; 60 is not, nor the gap after it (judged by
    # the rate before it); a recommendation with no rate before it stays.
    assert released(window, after, 0.1) == [unknown, near, *after]
    assert released(window, [rec(75, 4, None)], 0.1) == window  # no rate in the release window: nothing released


@settings(max_examples=100, deadline=None)
@given(
    rates=st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=30),
    recent=st.integers(1, 30),
    tolerance=st.floats(0, 0.5),
)
def test_released_keeps_the_release_window_and_never_empties(
    rates: list[float | None], recent: int, tolerance: float
) -> None:
    window = [Recommendation(15.0 * i, 1.0, 1.0, i, r) for i, r in enumerate(rates)]
    tail = window[-recent:]
    kept = released(window, tail, tolerance)
    assert kept and all(r in window for r in kept)
    assert all(r in kept for r in tail)
    assert max(r.replicas for r in kept) >= max(r.replicas for r in tail)


def burst_then_calm(spec: AutoscalingPolicySpec, *, up_at: float | None = None) -> list[tuple[float, int]]:
    """8 replicas through a burst (60 requests/s, KV on target) that ends at t=150 (then 25 requests/s, KV
    low); ``up_at``: the burst's scale-up (4 → 8) at that time instead of 8 replicas from the start.
    Returns (time, replicas) of every scale-down."""
    state, ready, downs = AutoscalerState(first_seen=-1000.0), 8 if up_at is None else 4, []
    for i in range(60):
        t = 15.0 * i
        fleet, kv = (60.0, 0.75) if t < 150 else (25.0, 0.3)
        v = view(ready=ready, kv=kv * 8 / ready, arrival=fleet / ready, completion=fleet / ready, t=t)
        d, state = decide(spec, state, v, ready=ready, starting=0, now=t)
        if up_at is not None and t == up_at:
            d, ready = replace(d, desired=8), 8
            state = replace(state, last_up=t)
        if d.desired < ready:
            downs.append((t, d.desired))
        ready = d.desired
    return downs


def test_a_burst_that_ended_is_given_back_after_the_release_window_not_the_down_window() -> None:
    spec = replace(SPEC, stabilization_window_down_s=300, release_window_s=60)
    downs = burst_then_calm(spec)
    # The burst's recommendations stop holding once its last one (t=135) has left the 60 s release window.
    assert downs[0][0] == 135 + 60
    assert [n for _, n in downs] == sorted((n for _, n in downs), reverse=True)  # one step at a time
    assert burst_then_calm(replace(spec, release_window_s=0))[0][0] == 135 + 300  # off: the whole down-window
    # Never within the down-window of the last scale-up: reversing it that soon would be a flap.
    assert burst_then_calm(spec, up_at=120.0)[0][0] >= 120 + 300


def test_load_returning_within_the_release_window_keeps_its_peak() -> None:
    spec = replace(SPEC, stabilization_window_down_s=300, release_window_s=60)
    state, ready = AutoscalerState(first_seen=-1000.0), 6
    for i in range(80):
        t = 15.0 * i
        fleet, kv = (36.0, 0.7) if (t // 45) % 2 == 0 else (18.0, 0.3)  # 45 s high, 45 s low
        v = view(ready=ready, kv=kv, arrival=fleet / ready, completion=fleet / ready, t=t)
        d, state = decide(spec, state, v, ready=ready, starting=0, now=t)
        assert d.desired >= 6, f"scaled down at t={t:g} though the peak returns every 90 s"
        ready = d.desired


def test_max_step_up_and_limits() -> None:
    (d,) = run(SPEC, [{"waiting": 40, "arrival": 20.0, "completion": 2.0}], ready=2)  # demand 20+, panic, +4 at most
    assert d.desired == 6 and d.step_limited and "step limited to +4" in d.reason
    (d,) = run(SPEC, [{"waiting": 400, "arrival": 20.0, "completion": 2.0}], ready=8)
    assert d.desired == 10 and d.limited is ScalingLimit.AT_MAX and "at max_replicas 10" in d.reason


def test_at_min_is_reported() -> None:
    ds = run(SPEC, [{"kv": 0.0}] * 20, ready=1)
    assert all(d.desired == 1 and d.limited is ScalingLimit.AT_MIN for d in ds)


def test_min_zero_scales_to_zero_and_stays_there() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "min_replicas": 0})
    ds = run(spec, [{"kv": 0.0}] * 14, ready=1)
    assert ds[-1].desired == 0 and "kv_cache_usage 0 < target 0.75 on 1 replicas → 0" in ds[-1].reason
    d, _ = decide(spec, AutoscalerState(), None, ready=0, starting=0, now=0)
    assert d.desired == 0 and "no ready replicas" in d.reason


def test_clamp_wins_over_step_when_bounds_change() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "max_replicas": 3})
    (d,) = run(spec, [{"kv": 0.75}], ready=8)
    assert d.desired == 3 and "clamped" in d.reason


def test_panic_on_burst_scales_without_waiting_and_blocks_scale_down() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "stabilization_window_up_s": 30, "stabilization_window_down_s": 0})
    burst = {"kv": 1.0, "waiting": 20, "arrival": 10.0, "completion": 2.0}  # 5x what the fleet serves
    ds = run(spec, [{"kv": 0.6}] * 3 + [burst] + [{"kv": 0.1}] * 14, ready=2)
    burst = ds[3]
    assert burst.panic and burst.desired == 6 and "panic" in burst.reason  # demand 10, step +4
    hold = [d for d in ds[4:] if d.panic]
    assert hold and all(d.desired >= d.current for d in hold)
    assert not ds[-1].panic and ds[-1].desired == 1  # after panic_hold_s the down-window (0 s) lets it go


def test_an_undone_scale_down_becomes_a_floor_with_backoff() -> None:
    spec = AutoscalingPolicySpec(
        **{**SPEC.__dict__, "stabilization_window_down_s": 60, "scale_down_memory_s": 600, "tolerance": 0.0}
    )
    state, t = AutoscalerState(), 0.0

    def step(ready: int, kv: float) -> ScaleDecision:
        nonlocal state, t
        d, state = decide(spec, state, view(ready=ready, kv=kv, t=t), ready=ready, starting=0, now=t)
        t += 10
        return d

    def until_scaled_down() -> list[ScaleDecision]:
        held = []
        while (d := step(2, 0.3)).desired == 2:
            held.append(d)
        assert d.desired == 1
        return held

    until_scaled_down()  # 2 → 1 after the down-window
    up = step(1, 1.0)  # ... proved too few at once
    assert up.desired == 2 and "scale-down 2 → 1 undone: 2 is a floor for 600 s" in up.reason
    held = until_scaled_down()
    assert len(held) * 10 >= 600 - 10  # the floor holds for scale_down_memory_s, not just the down-window
    assert "a scale-down below 2 was undone recently: held at 2" in held[-1].reason
    again = step(1, 1.0)
    assert "2 is a floor for 1200 s" in again.reason  # proven again: held twice as long


def test_a_floor_lapses_once_demand_falls_clearly_below_where_it_was_proven() -> None:
    spec = AutoscalingPolicySpec(
        **{**SPEC.__dict__, "stabilization_window_down_s": 60, "scale_down_memory_s": 3600, "tolerance": 0.0}
    )
    state, t = AutoscalerState(), 0.0

    def step(ready: int, kv: float) -> ScaleDecision:
        nonlocal state, t
        d, state = decide(spec, state, view(ready=ready, kv=kv, t=t), ready=ready, starting=0, now=t)
        t += 10
        return d

    while step(2, 0.3).desired == 2:
        pass
    assert "2 is a floor" in step(1, 1.0).reason  # 2 → 1 at demand 0.8 was undone
    held = [step(2, 0.3) for _ in range(10)]
    assert all(d.desired == 2 for d in held)  # same load: the floor holds
    lighter = [step(2, 0.1) for _ in range(10)]  # demand 0.27, far below the 0.8 it was proven at
    assert lighter[-1].desired == 1 and "undone recently" not in lighter[-1].reason


def test_served_rate_near_target_holds_scale_downs_that_utilisation_would_allow() -> None:
    near = view(ready=4, kv=0.7, arrival=5.0, completion=5.0, t=0.0)  # one replica serves 5/s at KV 0.7
    _, state = decide(SPEC, AutoscalerState(), near, ready=4, starting=0, now=0.0)
    assert state.capacity == ((0.0, 5.0),)
    # Later: KV 0.11 projects to 1 replica, but 4 × 2/s arriving needs 8/5 → 2 of what was seen to work.
    light = view(ready=4, kv=0.11, arrival=2.0, completion=2.0, t=10.0)
    signals = {s.name: s for s in compute_signals(SPEC, light, 4, served_on_target=5.0)}
    assert signals["kv_cache_usage"].demand < 1 and signals["arrival_rate"].demand == pytest.approx(8 / 5 / 1.1)
    ready, counts = 4, []
    for i in range(60):  # 8 requests/s in all, KV as low as at 4 replicas whatever the count
        t = 10.0 + 5 * i
        v = view(ready=ready, kv=0.11, arrival=8 / ready, completion=8 / ready, t=t)
        d, state = decide(SPEC, state, v, ready=ready, starting=0, now=t)
        ready = d.desired
        counts.append(ready)
    assert min(counts) == counts[-1] == 2  # down to what 8/s needs at 5/s per replica, never below
    # The signal only holds: at any rate it asks for at most the current count.
    busy = compute_signals(SPEC, view(ready=4, kv=0.9, arrival=50.0, completion=6.0), 4, served_on_target=5.0)
    assert next(s.demand for s in busy if s.name == "arrival_rate") == 4


def test_served_rate_far_below_target_is_not_capacity() -> None:
    """An oversized fleet at low load must still scale down: its rates say little about what a replica serves."""
    idle = view(ready=8, kv=0.05, arrival=0.3, completion=0.3)
    _, state = decide(SPEC, AutoscalerState(), idle, ready=8, starting=0, now=0.0)
    assert state.capacity == ()
    _, state = decide(SPEC, state, view(ready=4, kv=0.8, arrival=9.0, completion=6.0, t=5), ready=4, starting=0, now=5)
    assert state.capacity == ()  # above the target is not on target either
    draining = view(ready=4, kv=0.7, arrival=3.0, completion=6.0, t=10)  # a backlog draining: not a steady rate
    _, state = decide(SPEC, state, draining, ready=4, starting=0, now=10)
    assert state.capacity == ()


def test_preemptions_alone_do_not_panic() -> None:
    """A preemption storm is the tuner's to fix first: it scales only through the stabilised path."""
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "stabilization_window_up_s": 30})
    ds = run(spec, [{"kv": 0.9, "preempt": 5.0}] * 8, ready=2)  # demand 20 replicas = 10x capacity
    assert not any(d.panic for d in ds)
    assert [d.desired for d in ds[:6]] == [2] * 6 and ds[6].desired == 6


def test_starting_pods_are_credited() -> None:
    # 2 ready pods at kv 0.95 (demand 2.5 → 3) while 2 more are booting: capacity 4 is enough.
    (d,) = run(SPEC, [{"kv": 0.95}], ready=2, starting=2)
    assert d.desired == 4 and d.change == 0
    busy = {"kv": 0.95, "waiting": 12, "arrival": 6.0, "completion": 2.0}
    (d,) = run(SPEC, [busy], ready=2, starting=2)  # demand 6 > 4: add 2 only
    assert d.desired == 6


def test_no_view_holds_and_flags() -> None:
    d, _ = decide(SPEC, AutoscalerState(), None, ready=3, starting=1, now=0)
    assert d.desired == 4 and d.degraded and "no ready replica answered" in d.reason
    d, _ = decide(SPEC, AutoscalerState(), None, ready=0, starting=2, now=0)
    assert d.desired == 2 and not d.degraded and "no ready replicas" in d.reason


def test_degraded_view_does_not_scale_down() -> None:
    ds = run(
        AutoscalingPolicySpec(**{**SPEC.__dict__, "stabilization_window_down_s": 0}),
        [{"kv": 0.1, "reporting": 1, "degraded": True}],
        ready=4,
    )
    assert ds[0].desired == 4 and "only 1/4 replicas reported: no scale-down" in ds[0].reason
    ds = run(SPEC, [{"kv": 1.0, "reporting": 1, "degraded": True}], ready=4)
    assert ds[0].desired == 6  # scale-up still allowed on partial data


def test_no_scale_down_while_requests_wait() -> None:
    spec = AutoscalingPolicySpec(**{**SPEC.__dict__, "stabilization_window_down_s": 0})
    idle_but_queued = {"kv": 0.1, "waiting": 6.0, "arrival": 1.0, "completion": 4.0}  # few arrivals, queue above target
    (d,) = run(spec, [idle_but_queued], ready=4)
    assert d.desired == 4 and "requests waiting above target: no scale-down" in d.reason


def test_dry_run_is_marked() -> None:
    (d,) = run(AutoscalingPolicySpec(**{**SPEC.__dict__, "dry_run": True}), [{"kv": 0.93}], ready=3)
    assert d.dry_run and d.reason.startswith("dry-run: ") and d.desired == 4


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("min_replicas", -1, "min_replicas must be non-negative, got -1"),
        ("max_replicas", 0, r"max_replicas \(0\) must be at least 1 and at least min_replicas \(1\)"),
        ("target_kv_usage", 1.2, r"target_kv_usage must be in \(0, 1\], got 1.2"),
        ("target_waiting_per_replica", 0, "target_waiting_per_replica must be positive, got 0"),
        ("ttft_p95_slo_s", -1.0, "ttft_p95_slo_s must be positive when set, got -1.0"),
        ("tolerance", 1.0, r"tolerance must be in \[0, 1\), got 1.0"),
        ("stabilization_window_down_s", -5, "stabilization_window_down_s must be non-negative, got -5"),
        ("release_window_s", -1.0, "release_window_s must be non-negative, got -1.0"),
        ("max_step_up", 0, "max_step_up and max_step_down must be at least 1"),
        ("panic_threshold", 1.0, "panic_threshold must be greater than 1, got 1.0"),
    ],
)
def test_spec_validation_names_the_value(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AutoscalingPolicySpec(**{field: value})


def test_bad_counts_rejected() -> None:
    with pytest.raises(ValueError, match="must be non-negative, got -1 and 0"):
        decide(SPEC, AutoscalerState(), None, ready=-1, starting=0, now=0)


# ---- properties -------------------------------------------------------------------------------

specs = st.builds(
    AutoscalingPolicySpec,
    min_replicas=st.integers(0, 3),
    max_replicas=st.integers(3, 20),
    stabilization_window_up_s=st.sampled_from([0.0, 15.0, 30.0]),
    stabilization_window_down_s=st.sampled_from([0.0, 60.0, 300.0]),
    max_step_up=st.integers(1, 5),
    max_step_down=st.integers(1, 3),
    panic_threshold=st.sampled_from([1.5, 2.0, 3.0]),
)
loads = st.fixed_dictionaries(
    {
        "kv": st.floats(0, 1),
        "waiting": st.floats(0, 100),
        "preempt": st.one_of(st.none(), st.floats(0, 20)),
        "degraded": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(spec=specs, ticks=st.lists(st.tuples(loads, st.integers(0, 25), st.integers(0, 5)), min_size=1, max_size=40))
def test_desired_within_bounds_and_steps(spec: AutoscalingPolicySpec, ticks: list) -> None:
    state = AutoscalerState()
    for i, (load, ready, starting) in enumerate(ticks):
        v = view(ready=ready, t=i * 5.0, **load) if ready else None
        d, state = decide(spec, state, v, ready=ready, starting=starting, now=i * 5.0)
        assert spec.min_replicas <= d.desired <= spec.max_replicas
        if spec.min_replicas <= d.current <= spec.max_replicas:  # outside the bounds the clamp may jump
            assert -spec.max_step_down <= d.change <= spec.max_step_up
        if load["degraded"] and d.current >= spec.min_replicas and d.current <= spec.max_replicas:
            assert d.change >= 0


@settings(max_examples=100, deadline=None)
@given(
    ready=st.integers(1, 50),
    starting=st.integers(0, 10),
    waiting=st.floats(0, 1e9),
    arrival=st.one_of(st.none(), st.floats(0, 1e9)),
    served=st.one_of(st.none(), st.floats(0, 1e9)),
    preempt=st.one_of(st.none(), st.floats(0, 1e9)),
)
def test_extreme_readings_give_an_answer_within_bounds(
    ready: int, starting: int, waiting: float, arrival: float | None, served: float | None, preempt: float | None
) -> None:
    v = view(ready=ready, kv=1.0, waiting=waiting, arrival=arrival, completion=served, preempt=preempt)
    d, _ = decide(SPEC, AutoscalerState(), v, ready=ready, starting=starting, now=0)
    assert SPEC.min_replicas <= d.desired <= SPEC.max_replicas


@settings(max_examples=60, deadline=None)
@given(spec=specs, kv=st.floats(0.05, 1), waiting=st.floats(0, 30))
def test_constant_load_converges_and_stays(spec: AutoscalingPolicySpec, kv: float, waiting: float) -> None:
    """With a load that is constant per *total* demand, replicas settle and never move again."""
    total_kv, total_waiting = kv * 4, waiting * 4  # fixed work, spread over however many replicas there are
    replicas, state, history = 4, AutoscalerState(), []
    for i in range(400):
        now = i * 5.0
        v = view(ready=replicas, kv=min(1.0, total_kv / replicas), waiting=total_waiting / replicas, t=now)
        d, state = decide(spec, state, v, ready=replicas, starting=0, now=now)
        replicas = d.desired
        history.append(replicas)
    tail = history[-100:]
    assert len(set(tail)) == 1, f"still moving at the end: {tail}"


@settings(max_examples=60, deadline=None)
@given(period=st.sampled_from([10.0, 20.0, 40.0]), high=st.floats(0.8, 1.0), low=st.floats(0.0, 0.3))
def test_load_oscillating_faster_than_down_window_never_scales_down(period: float, high: float, low: float) -> None:
    spec = AutoscalingPolicySpec(stabilization_window_up_s=0, stabilization_window_down_s=120)
    replicas, state = 3, AutoscalerState()
    for i in range(200):
        now = i * 5.0
        kv = high if (now % period) < period / 2 else low
        d, state = decide(spec, state, view(ready=replicas, kv=kv, t=now), ready=replicas, starting=0, now=now)
        assert d.desired >= replicas, f"scaled down at t={now}: {d.reason}"
        replicas = d.desired


@settings(max_examples=60, deadline=None)
@given(ready=st.integers(2, 8), silent=st.integers(1, 7), kv=st.floats(0.6, 0.9))
def test_a_pod_not_reporting_does_not_drive_scale_down(ready: int, silent: int, kv: float) -> None:
    """Same per-replica load with fewer pods answering gives the same (or a higher) answer, never a lower one."""
    silent = min(silent, ready - 1)
    spec = AutoscalingPolicySpec(stabilization_window_down_s=0)
    full, _ = decide(spec, AutoscalerState(), view(ready=ready, kv=kv), ready=ready, starting=0, now=0)
    partial_view = view(ready=ready, reporting=ready - silent, kv=kv, degraded=(ready - silent) < 0.5 * ready)
    partial, _ = decide(spec, AutoscalerState(), partial_view, ready=ready, starting=0, now=0)
    assert partial.desired >= full.desired


@settings(max_examples=60, deadline=None)
@given(ready=st.integers(1, 5), factor=st.floats(2.2, 6))
def test_burst_triggers_panic(ready: int, factor: float) -> None:
    """A burst sustained over the panic window scales up long before the 60 s up-window would allow."""
    spec = AutoscalingPolicySpec(max_replicas=100, stabilization_window_up_s=60, panic_window_s=10)
    state = AutoscalerState()
    for t in (0.0, 5.0, 10.0, 15.0):
        d, state = decide(spec, state, view(ready=ready, kv=0.5, t=t), ready=ready, starting=0, now=t)
        assert not d.panic
    for t in (20.0, 25.0):
        burst = view(ready=ready, kv=1.0, waiting=40, arrival=factor, completion=1.0, t=t)
        d, state = decide(spec, state, burst, ready=ready, starting=0, now=t)
    assert d.panic and d.desired > ready and "panic" in d.reason


@settings(max_examples=60, deadline=None)
@given(ready=st.integers(1, 6), starting=st.integers(1, 6), kv=st.floats(0.75, 1.0))
def test_starting_pods_prevent_overshoot(ready: int, starting: int, kv: float) -> None:
    """Demand that fits into ready + starting pods adds nothing while they boot."""
    spec = AutoscalingPolicySpec(max_replicas=50, stabilization_window_up_s=0, target_waiting_per_replica=4)
    demand = ready * kv / spec.target_kv_usage
    d, _ = decide(spec, AutoscalerState(), view(ready=ready, kv=kv), ready=ready, starting=starting, now=0)
    if demand <= ready + starting:
        assert d.desired == ready + starting
    else:
        assert d.desired <= max(ready + starting, -(-demand // 1))
