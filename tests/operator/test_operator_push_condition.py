"""A budget push that missed engines is a Degraded condition naming each pod and why."""

from __future__ import annotations

from paged_operator.status.builder import budget_push_condition


def test_every_push_landed_is_no_condition() -> None:
    assert budget_push_condition({}) is None


def test_missed_pushes_are_degraded_with_each_pod_and_reason() -> None:
    value = budget_push_condition({"b-1": "no answer within 2 s", "a-0": "HTTP 401 from http://10.0.0.1"})
    assert value is not None and value.status == "True" and value.reason == "BudgetPushFailed"
    assert (
        value.message
        == "2 engines missed the budget push (a-0: HTTP 401 from http://10.0.0.1; b-1: no answer within 2 s)"
    )
