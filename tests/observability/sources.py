"""What the observability tests check: the rule files, the dashboards, and the PromQL inside them.

Paths are the single sources (under the chart's ``files/``); ``dashboards/`` only links to them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "paged"
RULES_DIR = CHART / "files" / "rules"
DASHBOARDS_DIR = CHART / "files" / "dashboards"
PROMTOOL_TESTS_DIR = Path(__file__).resolve().parent / "promtool"
RUNBOOKS = REPO / "docs" / "runbooks.md"
OBSERVABILITY_DOC = REPO / "docs" / "observability.md"
RUNBOOK_URL_PREFIX = "https://github.com/paged-dev/paged/blob/main/docs/runbooks.md#"

#: Grafana's built-in interval variable needs a duration where PromQL expects one; the template variables are
#: regex label values, for which any regex does.
_GRAFANA_INTERVAL = re.compile(r"\$__rate_interval|\$__interval|\$__range")
_GRAFANA_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>[A-Za-z_]\w*)\)$")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d[\w.]*")  # numbers and durations: 0.95, 1e3, 5m
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"inf", "nan", "Inf", "NaN"}
)


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yaml"))


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load_rules(path: Path) -> list[dict[str, Any]]:
    """Every rule (recording and alerting) of one rule file."""
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def all_rules() -> list[dict[str, Any]]:
    return [rule for path in rule_files() for rule in load_rules(path)]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in all_rules() if "alert" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def load_dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@dataclass(frozen=True)
class DashboardQuery:
    dashboard: str
    where: str  # panel title or variable name, for messages
    expr: str  # as written, Grafana variables included


def dashboard_queries() -> Iterator[DashboardQuery]:
    """Every PromQL expression of every dashboard: panel targets and the selectors of query variables."""
    for path in dashboard_files():
        board = load_dashboard(path)
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                yield DashboardQuery(path.name, panel["title"], target["expr"])
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = _LABEL_VALUES.match(variable["definition"])
            if not match:
                raise ValueError(f"{path.name}: variable {variable['name']}: not label_values(): {variable!r}")
            if match["selector"]:
                yield DashboardQuery(path.name, f"${variable['name']}", match["selector"])


def as_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, so that Prometheus can parse it."""
    return _GRAFANA_VARIABLE.sub(".*", _GRAFANA_INTERVAL.sub("5m", expr))


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords, label names or recorded-rule
    arguments of label_replace). Sufficient for our own queries, which name every metric bare, not via
    ``{__name__=...}``."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub("", text)
    text = _NUMBER.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        word = match.group()
        if rest.startswith("(") or word in _KEYWORDS:
            continue
        names.add(word)
    return names


_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_LIST_LABELS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def label_names(expr: str) -> set[str]:
    """Label names an expression matches on or groups by (not those label_replace writes)."""
    text = _STRING.sub('""', expr)
    names = {m.group(1) for block in re.findall(r"\{[^}]*\}", text) for m in _MATCHER_LABEL.finditer(block)}
    for group in _LIST_LABELS.findall(text):
        names.update(label.strip() for label in group.split(",") if label.strip())
    return names


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every rule and every dashboard query, dashboard variables replaced."""
    found = [(f"rule {rule.get('alert') or rule.get('record')}", rule["expr"]) for rule in all_rules()]
    found += [(f"{q.dashboard}: {q.where}", as_promql(q.expr)) for q in dashboard_queries()]
    return found


def names_used() -> dict[str, set[str]]:
    """Metric name -> where it is used ("rule X", "dashboard.json: panel"), over all rules and dashboards."""
    used: dict[str, set[str]] = {}
    for where, expr in expressions():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)
    return used


def exported_names(families: Iterator[Any]) -> set[str]:
    """Sample names a set of prometheus_client metric families exposes, whether or not a labelled child exists
    yet (a labelled counter with no child has no samples, but its name is part of the contract)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}
    names = set()
    for family in families:
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(sample.name for sample in family.samples)
    return names


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"^#{1,6} ", line)}


def pending_operator_names() -> set[str]:
    """Names listed in docs/observability.md's section of operator metrics not yet exported."""
    text = OBSERVABILITY_DOC.read_text()
    section = text.split("<!-- pending-operator-metrics -->", 2)
    if len(section) != 3:
        raise ValueError(f"{OBSERVABILITY_DOC}: no <!-- pending-operator-metrics --> ... section")
    return set(re.findall(r"`(paged_operator_\w+)`", section[1]))
