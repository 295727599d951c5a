"""The engine contract's budget rules, as properties: every budget the defaults produce holds the invariants, the
live limits always admit the starting budgets and a tuner's ceiling, and the checks name the field at fault."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_platform.engine_contract.budgets import (
    CPU_SERVING_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR,
    LIVE_MAX_NUM_SEQS_FLOOR,
    MAX_NUM_BATCHED_TOKENS_BOUNDS,
    MAX_NUM_SEQS_BOUNDS,
    BudgetLimits,
    Budgets,
    SettingError,
    limits_for_ceiling,
    live_limits,
    resolve_budgets,
)

seqs = st.integers(MAX_NUM_SEQS_BOUNDS.low, MAX_NUM_SEQS_BOUNDS.high)
tokens = st.integers(MAX_NUM_BATCHED_TOKENS_BOUNDS.low, MAX_NUM_BATCHED_TOKENS_BOUNDS.high)
devices = st.sampled_from(["cpu", "cuda"])


@given(seqs=st.none() | seqs, tokens=st.none() | tokens, device=devices, serving=st.booleans())
def test_defaults_never_break_tokens_cover_seqs(seqs: int | None, tokens: int | None, device: str, serving: bool):
    if seqs is not None and tokens is not None and tokens < seqs:
        with pytest.raises(SettingError, match="must be at least max_num_seqs") as info:
            resolve_budgets(seqs, tokens, device_type=device, serving=serving)
        assert info.value.param == "max_num_batched_tokens"
        return
    budgets = resolve_budgets(seqs, tokens, device_type=device, serving=serving)
    assert budgets.max_num_batched_tokens >= budgets.max_num_seqs
    assert budgets.max_num_seqs == (seqs if seqs is not None else min(DEFAULT_MAX_NUM_SEQS, tokens or 1 << 30))
    if tokens is not None:
        assert budgets.max_num_batched_tokens == tokens


def test_the_per_device_rule() -> None:
    assert resolve_budgets(None, None, device_type="cpu", serving=True) == Budgets(
        DEFAULT_MAX_NUM_SEQS, CPU_SERVING_MAX_NUM_BATCHED_TOKENS
    )
    for device, serving in (("cpu", False), ("cuda", True), ("cuda", False)):
        assert resolve_budgets(None, None, device_type=device, serving=serving) == Budgets(
            DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_NUM_BATCHED_TOKENS
        )


@given(start_seqs=seqs, extra=st.integers(0, 1 << 20), ceiling_seqs=st.none() | seqs, ceiling_tokens=tokens)
def test_limits_admit_the_start_and_the_ceiling(start_seqs: int, extra: int, ceiling_seqs, ceiling_tokens) -> None:
    start = Budgets(start_seqs, min(MAX_NUM_BATCHED_TOKENS_BOUNDS.high, start_seqs + extra))
    floor = live_limits(start)
    assert floor.admits(start)
    assert floor == BudgetLimits(max(LIVE_MAX_NUM_SEQS_FLOOR, start.max_num_seqs),
                                 max(LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR, start.max_num_batched_tokens))  # fmt: skip
    ceiling = None if ceiling_seqs is None else BudgetLimits(ceiling_seqs, ceiling_tokens)
    limits = limits_for_ceiling(start, ceiling)
    assert limits.admits(start)
    if ceiling is not None:
        assert (
            limits.max_num_seqs >= ceiling.max_num_seqs
            and limits.max_num_batched_tokens >= ceiling.max_num_batched_tokens
        )
    # an engine started with these limits as flags gets exactly them
    assert live_limits(start, limits.max_num_seqs, limits.max_num_batched_tokens) == limits


@given(limit_seqs=seqs, limit_tokens=tokens, wanted_seqs=seqs, wanted_tokens=tokens)
def test_a_limit_check_admits_exactly_what_admits_says(limit_seqs, limit_tokens, wanted_seqs, wanted_tokens) -> None:
    if wanted_tokens < wanted_seqs:
        return
    limits, wanted = BudgetLimits(limit_seqs, limit_tokens), Budgets(wanted_seqs, wanted_tokens)
    if limits.admits(wanted):
        assert limits.check(wanted) == wanted
        return
    with pytest.raises(SettingError, match=r"must be in \[1, \d+\], got \d+") as info:
        limits.check(wanted)
    assert info.value.param == ("max_num_seqs" if wanted_seqs > limit_seqs else "max_num_batched_tokens")


def test_limits_below_the_start_are_refused_naming_the_flag() -> None:
    with pytest.raises(SettingError, match=r"max_num_batched_tokens_limit \(100\) is below") as info:
        live_limits(Budgets(8, 512), max_num_batched_tokens_limit=100)
    assert info.value.param == "max_num_batched_tokens_limit"


@pytest.mark.parametrize("bad", [0, -1, MAX_NUM_SEQS_BOUNDS.high + 1, True, 2.5])
def test_budgets_out_of_bounds_name_the_field(bad: object) -> None:
    with pytest.raises(SettingError) as info:
        Budgets(bad, 1 << 20)  # type: ignore[arg-type]
    assert info.value.param == "max_num_seqs" and "max_num_seqs" in str(info.value)
