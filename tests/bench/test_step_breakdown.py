"""The benchmark's step-time breakdown from two scrapes: per-step milliseconds, shares of the core's step."""

from __future__ import annotations

import pytest
from paged_platform.bench.step_breakdown import breakdown, format_breakdown


def test_breakdown_divides_by_steps_and_shares_only_engine_phases() -> None:
    before = {"schedule": (1.0, 10), "model": (5.0, 10), "sample": (1.0, 10), "detokenize": (0.5, 30)}
    after = {"schedule": (1.1, 20), "model": (5.8, 20), "sample": (1.1, 20), "detokenize": (0.6, 60),
             "ipc_decode": (0.02, 10)}  # fmt: skip
    rows = {row.phase: row for row in breakdown(before, after)}
    assert rows["model"].ms_per_step == pytest.approx(80.0) and rows["model"].share == pytest.approx(0.8)
    assert rows["schedule"].share == pytest.approx(0.1) and rows["sample"].share == pytest.approx(0.1)
    assert rows["detokenize"].share is None and rows["detokenize"].ms_per_step == pytest.approx(10.0)
    assert rows["ipc_decode"].ms_per_step == pytest.approx(2.0)  # new since the first scrape
    assert "| model | 80.00 | 80% |" in format_breakdown(list(rows.values()))


def test_no_step_between_the_scrapes_gives_no_rows() -> None:
    assert breakdown({"model": (1.0, 5)}, {"model": (1.0, 5)}) == []
