"""Budget tuner policy: AIMD on max_num_seqs, SLO-driven max_num_batched_tokens, hysteresis, bounds."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_views import view
from paged_operator.policy.budget_tuner import (
    Budgets,
    BudgetSpec,
    TuneKind,
    TunerState,
    applied,
    decide,
    initial_state,
)

SPEC = BudgetSpec(
    min_num_seqs=8,
    max_num_seqs=128,
    min_num_batched_tokens=256,
    max_num_batched_tokens=4096,
    kv_high_water=0.9,
    kv_low_water=0.6,
    preemption_rate_threshold=0.1,
    decrease_factor=0.75,
    increase_step=8,
    cooldown_s=30,
    storm_memory_s=300,
)
START = TunerState(Budgets(64, 2048))


def test_storm_lowers_seqs_multiplicatively() -> None:
    d = decide(SPEC, START, view(kv=0.97, preempt=0.5), now=100)
    assert d.kind is TuneKind.LOWER_SEQS and d.budgets == Budgets(48, 2048)
    assert "preemptions 0.5/s per replica > 0.1 with KV usage 0.97 >= 0.9: max_num_seqs 64 → 48" in d.reason


def test_preemptions_without_full_kv_or_full_kv_without_preemptions_are_not_a_storm() -> None:
    assert decide(SPEC, START, view(kv=0.8, preempt=2.0), now=0).budgets is None
    assert decide(SPEC, START, view(kv=0.99, preempt=0.0), now=0).budgets is None


def test_idle_memory_with_a_queue_raises_additively() -> None:
    d = decide(SPEC, START, view(kv=0.3, waiting=5, preempt=0.0), now=0)
    assert d.kind is TuneKind.RAISE_SEQS and d.budgets == Budgets(72, 2048)
    assert decide(SPEC, START, view(kv=0.3, waiting=0, preempt=0.0), now=0).budgets is None  # nobody waits


def test_binding_budget_is_raised_in_one_projected_step() -> None:
    # The batch is capped at max_num_seqs=16 with KV at 0.2: the budget, not memory, holds requests back.
    small = TunerState(Budgets(16, 2048))
    bound = replace(view(kv=0.2, waiting=5), running_per_replica=16.0)
    d = decide(SPEC, small, bound, now=0)
    assert d.kind is TuneKind.RAISE_SEQS and d.budgets == Budgets(48, 2048)  # 16 x 0.6 / 0.2
    assert "max_num_seqs 16 binds" not in d.reason and "KV usage 0.20 < 0.6" in d.reason
    # Between the water marks a binding budget still rises (additively) until KV nears the high-water mark.
    mid = replace(view(kv=0.75, waiting=5), running_per_replica=48.0)
    d = decide(SPEC, TunerState(Budgets(48, 2048)), mid, now=0)
    assert d.budgets == Budgets(56, 2048) and "max_num_seqs 48 binds" in d.reason
    assert decide(SPEC, TunerState(Budgets(48, 2048)), replace(mid, kv_usage_max=0.92), now=0).budgets is None


def test_storm_is_judged_on_the_fullest_pod() -> None:
    uneven = replace(view(kv=0.5, preempt=0.5), kv_usage_max=0.98)  # one pod thrashes, the mean hides it
    assert decide(SPEC, START, uneven, now=0).kind is TuneKind.LOWER_SEQS


def test_dead_band_between_water_marks() -> None:
    for kv in (0.6, 0.75, 0.89):
        assert decide(SPEC, START, view(kv=kv, waiting=10, preempt=0.05), now=0).budgets is None


def test_cooldown_between_changes() -> None:
    d = decide(SPEC, START, view(kv=0.97, preempt=0.5), now=100)
    state = applied(SPEC, START, d, now=100)
    again = decide(SPEC, state, view(kv=0.97, preempt=0.5), now=110)
    assert again.budgets is None and "cooling down after the last change (20 s left)" in again.reason
    assert decide(SPEC, state, view(kv=0.97, preempt=0.5), now=130).budgets == Budgets(36, 2048)


def test_bounds_and_storm_memory() -> None:
    low = TunerState(Budgets(9, 2048))
    assert decide(SPEC, low, view(kv=0.97, preempt=0.5), now=0).budgets == Budgets(8, 2048)
    at_min = TunerState(Budgets(8, 2048))
    d = decide(SPEC, at_min, view(kv=0.97, preempt=0.5), now=0)
    assert d.budgets is None and "at its lower bound 8" in d.reason
    at_max = TunerState(Budgets(128, 2048))
    assert decide(SPEC, at_max, view(kv=0.2, waiting=5), now=0).budgets is None
    # Storm at 64 → 48; raises then stop at 64 - 8 = 56 while the storm is remembered, and resume after.
    state = applied(SPEC, START, decide(SPEC, START, view(kv=0.97, preempt=0.5), now=0), now=0)
    hungry = view(kv=0.3, waiting=5)
    state = applied(SPEC, state, decide(SPEC, state, hungry, now=40), now=40)
    assert state.budgets.max_num_seqs == 56
    capped = decide(SPEC, state, hungry, now=80)
    assert capped.budgets is None and "at its ceiling 56" in capped.reason
    assert decide(SPEC, state, hungry, now=301).budgets == Budgets(64, 2048)


def test_out_of_bounds_budgets_are_clamped_first() -> None:
    d = decide(SPEC, TunerState(Budgets(512, 8192)), None, now=0)
    assert d.kind is TuneKind.CLAMP and d.budgets == Budgets(128, 4096)
    assert initial_state(SPEC, Budgets(4, 100)).budgets == Budgets(8, 256)


def test_needs_a_rate_and_a_view() -> None:
    assert "no metrics" in decide(SPEC, START, None, now=0).reason
    assert "needs two samples" in decide(SPEC, START, view(kv=0.99, preempt=None), now=0).reason


SLO = BudgetSpec(**{**SPEC.__dict__, "ttft_p95_slo_s": 1.0, "itl_p95_slo_s": 0.05})


def test_batched_tokens_follow_latency_objectives() -> None:
    d = decide(SLO, START, view(kv=0.7, waiting=3, ttft=2.0, itl=0.02), now=0)
    assert d.kind is TuneKind.RAISE_TOKENS and d.budgets == Budgets(64, 4096)
    d = decide(SLO, START, view(kv=0.7, waiting=0, ttft=0.5, itl=0.09), now=0)
    assert d.kind is TuneKind.LOWER_TOKENS and d.budgets == Budgets(64, 1024)
    both = decide(SLO, START, view(kv=0.7, waiting=3, ttft=2.0, itl=0.09), now=0)
    assert both.budgets is None and "short of capacity" in both.reason
    assert decide(SLO, START, view(kv=0.95, waiting=3, ttft=2.0, itl=0.02), now=0).budgets is None  # KV full
    assert decide(SPEC, START, view(kv=0.7, waiting=3, ttft=9.0, itl=0.9), now=0).budgets is None  # no SLOs set


def test_tokens_do_not_flip_flop_between_ttft_and_itl() -> None:
    ttft_bad = view(kv=0.7, waiting=3, ttft=2.0, itl=0.02)
    itl_bad = view(kv=0.7, waiting=0, ttft=0.5, itl=0.09)
    state = applied(SLO, START, d := decide(SLO, START, ttft_bad, now=0), now=0)
    assert d.budgets == Budgets(64, 4096)
    state = applied(SLO, state, d := decide(SLO, state, itl_bad, now=60), now=60)  # 4096 broke ITL
    assert d.budgets == Budgets(64, 2048)
    again = decide(SLO, state, ttft_bad, now=120)
    assert again.budgets is None  # 2048 x 2 = 4096 is where ITL broke: not again within the memory
    assert "ITL broke at max_num_batched_tokens 4096" in again.reason
    assert decide(SLO, state, ttft_bad, now=60 + SLO.storm_memory_s).budgets == Budgets(64, 4096)


def test_tokens_never_below_seqs() -> None:
    state = TunerState(Budgets(128, 256))
    d = decide(SLO, state, view(kv=0.7, itl=0.09), now=0)
    assert d.budgets is None  # halving would go below max_num_seqs
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(16\) must be at least max_num_seqs \(32\)"):
        Budgets(32, 16)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("min_num_seqs", 0, r"need 1 <= min_num_seqs \(0\)"),
        ("max_num_batched_tokens", 100, r"min_num_batched_tokens \(512\) must not exceed max_num_batched_tokens"),
        ("kv_low_water", 0.95, r"kv_low_water \(0.95\) < kv_high_water \(0.9\)"),
        ("decrease_factor", 1.0, r"decrease_factor must be in \(0, 1\), got 1.0"),
        ("increase_step", 0, "increase_step must be at least 1, got 0"),
        ("batched_tokens_factor", 1.0, "batched_tokens_factor must be greater than 1, got 1.0"),
        ("cooldown_s", -1, "cooldown_s must be non-negative, got -1"),
        ("ttft_p95_slo_s", 0.0, "ttft_p95_slo_s must be positive when set, got 0.0"),
    ],
)
def test_spec_validation_names_the_value(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BudgetSpec(**{field: value})


@settings(max_examples=200, deadline=None)
@given(
    ticks=st.lists(
        st.fixed_dictionaries(
            {
                "kv": st.floats(0, 1),
                "waiting": st.floats(0, 50),
                "preempt": st.one_of(st.none(), st.floats(0, 5)),
                "ttft": st.one_of(st.none(), st.floats(0, 5)),
                "itl": st.one_of(st.none(), st.floats(0, 0.2)),
            }
        ),
        max_size=60,
    )
)
def test_budgets_stay_in_bounds_and_respect_cooldown(ticks: list[dict]) -> None:
    state, changes = TunerState(Budgets(64, 2048)), []
    for i, load in enumerate(ticks):
        now = i * 10.0
        d = decide(SLO, state, view(**load), now=now)
        if d.budgets is not None:
            b = d.budgets
            assert SLO.min_num_seqs <= b.max_num_seqs <= SLO.max_num_seqs
            assert SLO.min_num_batched_tokens <= b.max_num_batched_tokens <= SLO.max_num_batched_tokens
            assert b.max_num_batched_tokens >= b.max_num_seqs
            assert b != state.budgets
            changes.append(now)
            state = applied(SLO, state, d, now)
    assert all(b - a >= SLO.cooldown_s for a, b in itertools.pairwise(changes))


@settings(max_examples=150, deadline=None)
@given(
    load=st.fixed_dictionaries(
        {
            "kv": st.floats(0, 1),
            "waiting": st.floats(0, 50),
            "preempt": st.floats(0, 5),
            "ttft": st.one_of(st.none(), st.floats(0, 5)),
            "itl": st.one_of(st.none(), st.floats(0, 0.2)),
        }
    ),
    running=st.floats(0, 200),
)
def test_a_constant_picture_moves_budgets_one_way_only(load: dict, running: float) -> None:
    """Hysteresis: the same evidence never makes the tuner go up and then down (or back)."""
    state, seen = TunerState(Budgets(64, 2048)), [Budgets(64, 2048)]
    v = replace(view(**load), running_per_replica=running)
    for i in range(40):
        d = decide(SLO, state, v, now=i * 60.0)
        if d.budgets is not None:
            state = applied(SLO, state, d, i * 60.0)
            seen.append(d.budgets)
    for field in ("max_num_seqs", "max_num_batched_tokens"):
        values = [getattr(b, field) for b in seen]
        assert values == sorted(values) or values == sorted(values, reverse=True), values
