"""The Prometheus rule files: valid for promtool, every alert unit-tested both ways, annotated, linked to its
runbook."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.observability.conftest import run_tool
from tests.observability.sources import (
    PROMTOOL_TESTS_DIR,
    RUNBOOK_URL_PREFIX,
    RUNBOOKS,
    alerts,
    all_rules,
    markdown_anchors,
    metric_names,
    names_used,
    recorded_names,
    rule_files,
)

PROMTOOL_TESTS = sorted(PROMTOOL_TESTS_DIR.glob("*.test.yaml"))
ALERT_NAMES = sorted(rule["alert"] for rule in alerts())
#: What the issue asks alerts for; a rename or removal must be deliberate.
EXPECTED_ALERTS = {
    "PagedEngineDown",
    "PagedEngineMetricsAbsent",
    "PagedKVCacheNearFull",
    "PagedPreemptionStorm",
    "PagedRequestQueueBuildingUp",
    "PagedTTFTAboveSLO",
    "PagedAutoscalerAtMaxReplicas",
    "PagedOperatorReconcileErrors",
    "PagedOperatorDown",
}


def test_the_expected_alerts_exist() -> None:
    assert set(ALERT_NAMES) == EXPECTED_ALERTS
    assert len(ALERT_NAMES) == len(set(ALERT_NAMES)), "duplicate alert names"


@pytest.mark.k8s
@pytest.mark.parametrize("path", rule_files(), ids=lambda p: p.name)
def test_promtool_check_rules(promtool: Path, path: Path) -> None:
    run_tool(promtool, "check", "rules", path)


@pytest.mark.k8s
def test_promtool_unit_tests_pass(promtool: Path) -> None:
    assert PROMTOOL_TESTS, f"no promtool tests in {PROMTOOL_TESTS_DIR}"
    run_tool(promtool, "test", "rules", *(p.name for p in PROMTOOL_TESTS), cwd=PROMTOOL_TESTS_DIR)


def _alert_cases() -> dict[str, tuple[int, int]]:
    """Alert name -> (cases where it fires, cases where it must stay silent) over all promtool tests."""
    cases: dict[str, tuple[int, int]] = {}
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                fires, silent = cases.get(case["alertname"], (0, 0))
                if case.get("exp_alerts"):
                    fires += 1
                else:
                    silent += 1
                cases[case["alertname"]] = (fires, silent)
    return cases


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_every_alert_has_a_firing_and_a_silent_case(alert: str) -> None:
    fires, silent = _alert_cases().get(alert, (0, 0))
    assert fires >= 1, f"{alert}: no promtool case where it fires"
    assert silent >= 1, f"{alert}: no promtool case where it must stay silent"


def test_promtool_tests_name_only_existing_alerts() -> None:
    assert set(_alert_cases()) <= set(ALERT_NAMES)


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_alert_is_annotated_and_linked_to_its_runbook(rule: dict) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert annotations["summary"].strip() and annotations["description"].strip()
    url = annotations["runbook_url"]
    assert url == RUNBOOK_URL_PREFIX + rule["alert"].lower(), url
    anchor = url.removeprefix(RUNBOOK_URL_PREFIX)
    assert anchor in markdown_anchors(RUNBOOKS), f"{RUNBOOKS} has no section #{anchor} for {rule['alert']}"
    assert rule.get("for"), f"{rule['alert']} fires on a single evaluation; give it a `for:`"


def test_recorded_names_used_by_rules_are_recorded() -> None:
    recorded = recorded_names()
    for rule in all_rules():
        for name in metric_names(rule["expr"]):
            if ":" in name:
                assert name in recorded, f"rule {rule.get('alert') or rule.get('record')} uses unrecorded {name}"


def test_every_recording_rule_is_used() -> None:
    """A recorded series nobody reads costs Prometheus for nothing."""
    unused = recorded_names() - set(names_used())
    assert not unused, f"recorded but used by no rule or dashboard: {sorted(unused)}"


def _runbook_sections() -> dict[str, str]:
    """Level-2 heading -> its text, from docs/runbooks.md."""
    sections: dict[str, str] = {}
    for chunk in RUNBOOKS.read_text().split("\n## ")[1:]:
        heading, _, body = chunk.partition("\n")
        sections[heading.strip()] = body
    return sections


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_runbook_says_what_it_means_how_to_confirm_and_what_to_do(alert: str) -> None:
    body = _runbook_sections()[alert]
    for part in ("**Meaning.**", "**Confirm.**", "**Act.**"):
        assert part in body, f"runbook section {alert} has no {part}"
    confirm = body.split("**Confirm.**", 1)[1].split("**Act.**", 1)[0]
    assert "paged-ctl" in confirm or "kubectl" in confirm, f"{alert}: confirm with a command"
    assert any(name in confirm for name in ("paged_", "paged:", "up{")), f"{alert}: confirm with a PromQL query"


def test_runbooks_have_no_section_without_an_alert() -> None:
    assert set(_runbook_sections()) == set(ALERT_NAMES)
