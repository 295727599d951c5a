"""The Grafana dashboards: generated and committed alike, well-formed for Grafana, every query valid PromQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.observability.conftest import run_tool
from tests.observability.sources import (
    REPO,
    as_promql,
    dashboard_files,
    dashboard_queries,
    load_dashboard,
    metric_names,
    recorded_names,
)

DASHBOARDS = dashboard_files()
REQUIRED_VARIABLES = ("datasource", "namespace", "model_name", "pod")


def test_committed_dashboards_match_the_generator() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "dashboards" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert {p.name for p in DASHBOARDS} == {"paged-engine.json", "paged-fleet.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    board = load_dashboard(path)
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name in REQUIRED_VARIABLES:
        assert name in variables, f"{path.name}: no ${name} variable"
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids {ids}"
    for panel in board["panels"]:
        where = f"{path.name}: {panel['title']!r}"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where} has no unit"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, f"{where}: datasource"
        assert panel["targets"], f"{where} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], f"{where}: a target with another datasource"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), f"{where}: duplicate refIds"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_do_not_overlap(path: Path) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in load_dashboard(path)["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, f"{panel['title']!r} leaves the 24-column grid"
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


@pytest.mark.k8s
def test_every_dashboard_query_parses_as_promql(promtool: Path, tmp_path: Path) -> None:
    """Each expression becomes a throwaway recording rule: `promtool check rules` parses it with Prometheus'
    own parser."""
    queries = list(dashboard_queries())
    assert len(queries) > 20
    rules = [{"record": f"dashboard:query_{i}", "expr": as_promql(q.expr)} for i, q in enumerate(queries)]
    path = tmp_path / "dashboard-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    run_tool(promtool, "check", "rules", path)


@pytest.mark.k8s
def test_promtool_rejects_a_broken_dashboard_query(promtool: Path, tmp_path: Path) -> None:
    """The check above can fail: a query with an unbalanced bracket is refused."""
    path = tmp_path / "broken.rules.yaml"
    rule = {"record": "dashboard:broken", "expr": as_promql('sum by (pod) (rate(x{pod=~"$pod"}[$__rate_interval])')}
    path.write_text(yaml.safe_dump({"groups": [{"name": "broken", "rules": [rule]}]}))
    with pytest.raises(AssertionError, match="broken"):
        run_tool(promtool, "check", "rules", path)


def test_recorded_names_used_by_dashboards_are_recorded() -> None:
    recorded = recorded_names()
    for query in dashboard_queries():
        for name in metric_names(as_promql(query.expr)):
            if ":" in name:
                assert name in recorded, f"{query.dashboard}: {query.where!r} uses unrecorded {name}"
