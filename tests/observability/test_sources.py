"""The helpers that read names and anchors out of PromQL and Markdown: the other checks are only as good as they."""

from __future__ import annotations

from tests.observability.sources import as_promql, exported_names, label_names, metric_names, slug


def test_metric_names_skip_functions_keywords_labels_and_strings() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (namespace, le) (rate(paged_ttft_bucket{pod=~"a|b", le!="+Inf"}[5m])))'
        " > on (namespace, model_name) group_left () "
        'min by (namespace) (label_replace(slo_seconds, "namespace", "$1", "exported_namespace", "(.+)"))'
        ' and ignoring (pod) absent(up{job="x"} == 1) unless bool paged:recorded:rate5m offset 5m'
    )
    assert metric_names(expr) == {"paged_ttft_bucket", "slo_seconds", "up", "paged:recorded:rate5m"}


def test_grafana_variables_become_valid_promql() -> None:
    expr = 'rate(x{namespace=~"$namespace", pod=~"${pod}"}[$__rate_interval]) / label_replace(y, "a", "$1", "b", "")'
    assert as_promql(expr) == 'rate(x{namespace=~".*", pod=~".*"}[5m]) / label_replace(y, "a", "$1", "b", "")'


def test_exported_names_include_labelled_metrics_without_children() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    registry = CollectorRegistry()
    Counter("demo_events_total", "", ["kind"], registry=registry)
    Histogram("demo_seconds", "", ["handler"], registry=registry)
    Gauge("demo_level", "", registry=registry)
    assert exported_names(registry.collect()) == {
        "demo_events_total",
        "demo_seconds_bucket",
        "demo_seconds_sum",
        "demo_seconds_count",
        "demo_level",
    }


def test_slug_matches_github_anchors() -> None:
    assert slug(" PagedTTFTAboveSLO") == "pagedttftaboveslo"
    assert slug("Operator down: what to do") == "operator-down-what-to-do"


def test_label_names_from_matchers_and_groupings() -> None:
    expr = (
        'sum by (pod, le) (rate(x{namespace=~"a", model_name!="b"}[5m])) / on (pod) group_left (node) '
        'label_replace(y{job="j,k=v"}, "written", "$1", "read", "(.+)")'
    )
    assert label_names(expr) == {"pod", "le", "namespace", "model_name", "node", "job"}
