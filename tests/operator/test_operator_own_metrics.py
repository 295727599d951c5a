"""The operator's per-ModelDeployment gauges, which the fleet dashboard and the alerts read."""

from __future__ import annotations

from paged_operator import operator_metrics
from paged_platform.api.spec import ModelDeploymentSpec
from prometheus_client import REGISTRY


def _value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_fleet_gauges_follow_the_spec_and_are_forgotten_on_delete() -> None:
    spec = ModelDeploymentSpec.model_validate(
        {"replicas": {"min": 1, "max": 4}, "autoscaling": {"targets": {"ttftP95Seconds": 2.5}},
         "model": {"servedName": "chat"}}
    )  # fmt: skip
    operator_metrics.observe_fleet("ns", "md", spec, desired=3, ready=2)
    assert _value("paged_operator_desired_replicas", namespace="ns", name="md") == 3
    assert _value("paged_operator_ready_replicas", namespace="ns", name="md") == 2
    assert _value("paged_operator_max_replicas", namespace="ns", name="md") == 4
    assert _value("paged_operator_ttft_slo_seconds", namespace="ns", name="md", model_name="chat") == 2.5

    fixed = spec.model_copy(deep=True)
    fixed.autoscaling.enabled = False
    fixed.autoscaling.targets.ttft_p95_seconds = None
    operator_metrics.observe_fleet("ns", "md", fixed, desired=1, ready=1)
    assert _value("paged_operator_max_replicas", namespace="ns", name="md") is None  # at-max cannot fire
    assert _value("paged_operator_ttft_slo_seconds", namespace="ns", name="md", model_name="chat") is None

    operator_metrics.observe_fleet("ns", "md", spec, desired=3, ready=3)
    operator_metrics.forget("ns", "md")
    for metric in ("paged_operator_desired_replicas", "paged_operator_ready_replicas", "paged_operator_max_replicas"):
        assert _value(metric, namespace="ns", name="md") is None
    assert _value("paged_operator_ttft_slo_seconds", namespace="ns", name="md", model_name="chat") is None
