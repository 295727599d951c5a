"""The chart's monitoring objects: off by default, rendered from the single sources in files/ when on, and the
links under dashboards/ point at those sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from e2e.cluster.helm import render_chart
from tests.observability.conftest import run_tool
from tests.observability.sources import CHART, DASHBOARDS_DIR, REPO, RULES_DIR, dashboard_files, rule_files

ON = {
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.dashboards.enabled": "true",
    "serviceMonitor.enabled": "true",
}


def _kinds(objects: list[dict]) -> list[str]:
    return [o["kind"] for o in objects]


def _source_groups(engine_job: str, operator_job: str) -> list[dict]:
    groups = []
    for path in rule_files():
        text = path.read_text().replace('job="paged-engine"', f'job="{engine_job}"')
        groups += yaml.safe_load(text.replace('job="paged-operator"', f'job="{operator_job}"'))["groups"]
    return groups


@pytest.mark.k8s
def test_monitoring_is_off_by_default(helm: Path) -> None:
    kinds = _kinds(render_chart(helm, CHART, "paged", "paged-system"))
    assert "PrometheusRule" not in kinds
    assert "ConfigMap" not in kinds


@pytest.mark.k8s
def test_prometheus_rule_holds_the_rule_files_with_this_installations_jobs(helm: Path) -> None:
    objects = render_chart(helm, CHART, "paged", "paged-system", set_values=ON)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "paged-system"
    (service,) = [o for o in objects if o["kind"] == "Service" and o["spec"]["ports"][0]["name"] == "metrics"]
    assert rule["spec"]["groups"] == _source_groups("paged-engine", service["metadata"]["name"])


@pytest.mark.k8s
def test_prometheus_rule_jobs_and_labels_come_from_values(helm: Path) -> None:
    values = {
        **ON,
        "monitoring.prometheusRule.engineJob": "team-a/engines",
        "monitoring.prometheusRule.operatorJob": "ops",
        "monitoring.prometheusRule.labels.release": "kube-prometheus-stack",
    }
    objects = render_chart(helm, CHART, "paged", "paged-system", set_values=values)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == _source_groups("team-a/engines", "ops")


@pytest.mark.k8s
def test_rendered_rules_pass_promtool(helm: Path, promtool: Path, tmp_path: Path) -> None:
    """The job rewrite keeps the rules valid, also for a job name with characters PromQL strings must carry."""
    values = {**ON, "monitoring.prometheusRule.engineJob": "team-a/paged-engine"}
    objects = render_chart(helm, CHART, "paged", "paged-system", set_values=values)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    run_tool(promtool, "check", "rules", path)
    assert 'up{job="team-a/paged-engine"} == 0' in path.read_text()


@pytest.mark.k8s
def test_rules_without_an_operator_scrape_are_refused(helm: Path) -> None:
    """Without the ServiceMonitor or a job of its own, PagedOperatorDown could only ever fire."""
    values = {**ON, "serviceMonitor.enabled": "false"}
    with pytest.raises(RuntimeError, match=r"serviceMonitor\.enabled"):
        render_chart(helm, CHART, "paged", "paged-system", set_values=values)
    objects = render_chart(
        helm, CHART, "paged", "paged-system", set_values={**values, "monitoring.prometheusRule.operatorJob": "ops"}
    )
    assert "PrometheusRule" in _kinds(objects)


@pytest.mark.k8s
def test_dashboard_configmaps_hold_the_dashboards_for_the_grafana_sidecar(helm: Path) -> None:
    values = {
        **ON,
        "monitoring.dashboards.namespace": "monitoring",
        "monitoring.dashboards.annotations.grafana_folder": "paged",
    }
    objects = render_chart(helm, CHART, "paged", "paged-system", set_values=values)
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(maps) == len(dashboard_files())
    shipped = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "paged"}
        ((name, text),) = cm["data"].items()
        shipped[name] = json.loads(text)
    assert shipped == {p.name: json.loads(p.read_text()) for p in dashboard_files()}


@pytest.mark.k8s
@pytest.mark.parametrize("values", [{}, ON], ids=["default", "monitoring-on"])
def test_helm_lint_strict(helm: Path, values: dict[str, str]) -> None:
    argv: list[str | Path] = [helm, "lint", "--strict", CHART]
    for key, value in values.items():
        argv += ["--set", f"{key}={value}"]
    run_tool(*argv)


@pytest.mark.parametrize(
    ("key", "value"),
    [("monitoring.prometheusRule.engineJob", 'a"b'), ("monitoring.dashboards.namespace", "Not_A_Namespace")],
)
@pytest.mark.k8s
def test_schema_refuses_bad_monitoring_values(helm: Path, key: str, value: str) -> None:
    with pytest.raises(RuntimeError, match=key.rsplit(".", 1)[-1]):
        render_chart(helm, CHART, "paged", "paged-system", set_values={**ON, key: value})


def test_dashboards_folder_links_to_the_single_sources() -> None:
    """dashboards/ (where the design puts dashboards and rules) holds links, never copies that could drift."""
    links = {REPO / "dashboards" / p.name: p for p in dashboard_files()} | {
        REPO / "dashboards" / "rules" / p.name: p for p in rule_files()
    }
    for link, source in links.items():
        assert link.is_symlink(), f"{link} must be a link to {source}, not a copy"
        assert link.resolve() == source.resolve()
    present = {p for p in (REPO / "dashboards").rglob("*") if p.suffix in {".json", ".yaml"}}
    assert present == set(links), f"files under dashboards/ that are not links to {DASHBOARDS_DIR} or {RULES_DIR}"
