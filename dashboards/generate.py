"""Generate the Grafana dashboards (JSON) that the chart ships, from the panel lists below.

The JSON files under ``charts/paged/files/dashboards/`` are the single source Grafana and the chart read; this
script writes them, and ``--check`` fails while a committed file differs from what it would write (CI runs it
through ``tests/observability``). Panels are plain data so that each query sits next to its title and unit.

    python dashboards/generate.py           # rewrite the JSON files
    python dashboards/generate.py --check   # exit 1 if they are stale
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent.parent / "charts" / "paged" / "files" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Engine series filtered by the three template variables every dashboard has.
ENGINE = 'namespace=~"$namespace", model_name=~"$model_name", pod=~"$pod"'
MODEL = 'namespace=~"$namespace", model_name=~"$model_name"'
QUANTILES = (0.5, 0.95, 0.99)
PANEL_WIDTH, PANEL_HEIGHT, GRID_COLUMNS = 12, 8, 24


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    max_value: float | None = None
    stack: bool = False


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    extra_variables: tuple[dict[str, Any], ...] = field(default=())


def quantiles(bucket_rate: str, by: str, legend_prefix: str) -> tuple[Query, ...]:
    """p50/p95/p99 over a recorded per-pod bucket rate, aggregated ``by`` the given labels (plus ``le``)."""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({by}, le) ({bucket_rate}{{{ENGINE}}}))",
            f"{legend_prefix} p{round(q * 100)}",
        )
        for q in QUANTILES
    )


ENGINE_PANELS = (
    Panel(
        "KV-cache usage",
        "percentunit",
        (Query(f"paged_kv_cache_usage_ratio{{{ENGINE}}}", "{{pod}}"),),
        "Used KV blocks / total blocks per replica. Near 100 % new requests wait and running ones get preempted.",
        max_value=1,
    ),
    Panel(
        "Running and waiting requests",
        "short",
        (
            Query(f"sum by (pod) (paged_requests_running{{{ENGINE}}})", "{{pod}} running"),
            Query(f"sum by (pod) (paged_requests_waiting{{{ENGINE}}})", "{{pod}} waiting"),
        ),
        "The scheduler's queues. A waiting queue that never empties means the replica is saturated.",
    ),
    Panel(
        "Preemptions per second",
        "ops",
        (Query(f"paged:preemptions:rate5m{{{ENGINE}}}", "{{pod}}"),),
        "Requests preempted by recompute (5 m rate). Sustained preemption wastes compute: see PagedPreemptionStorm.",
    ),
    Panel(
        "Prefix-cache hit rate",
        "percentunit",
        (Query(f"paged:prefix_cache_hit_ratio:rate5m{{{ENGINE}}}", "{{pod}}"),),
        "Prompt tokens found in the prefix cache / prompt tokens looked up (5 m). No value while nothing is looked up.",
        max_value=1,
    ),
    Panel(
        "Time to first token",
        "s",
        quantiles("paged:time_to_first_token_seconds_bucket:rate5m", "model_name", "{{model_name}}"),
        "TTFT percentiles over the selected replicas (5 m).",
    ),
    Panel(
        "Inter-token latency",
        "s",
        quantiles("paged:inter_token_latency_seconds_bucket:rate5m", "model_name", "{{model_name}}"),
        "Time between consecutive output tokens of a request (5 m).",
    ),
    Panel(
        "End-to-end request latency",
        "s",
        quantiles("paged:e2e_request_latency_seconds_bucket:rate5m", "model_name", "{{model_name}}"),
        "From arrival to the last token (5 m).",
    ),
    Panel(
        "Queue time",
        "s",
        quantiles("paged:request_queue_time_seconds_bucket:rate5m", "model_name", "{{model_name}}"),
        "Time a request waited before it was first scheduled (5 m).",
    ),
    Panel(
        "Prompt and generation tokens per second",
        "suffix:tok/s",
        (
            Query(f"sum by (pod) (paged:prompt_tokens:rate5m{{{ENGINE}}})", "{{pod}} prompt"),
            Query(f"sum by (pod) (paged:generation_tokens:rate5m{{{ENGINE}}})", "{{pod}} generation"),
        ),
        "Tokens processed per second (5 m rate).",
    ),
    Panel(
        "Tokens per engine step",
        "short",
        (
            Query(
                f"sum by (pod) (rate(paged_iteration_tokens_sum{{{ENGINE}}}[$__rate_interval]))"
                f" / (sum by (pod) (rate(paged_iteration_tokens_count{{{ENGINE}}}[$__rate_interval])) > 0)",
                "{{pod}} mean",
            ),
            Query(
                "histogram_quantile(0.95, sum by (pod, le) "
                f"(rate(paged_iteration_tokens_bucket{{{ENGINE}}}[$__rate_interval])))",
                "{{pod}} p95",
            ),
        ),
        "Tokens computed per scheduler step: how full each batch is against max_num_batched_tokens.",
    ),
    Panel(
        "Scheduler budget: max_num_seqs",
        "short",
        (Query(f"paged_scheduler_max_num_seqs{{{ENGINE}}}", "{{pod}}"),),
        "Current sequences-per-step budget; the operator's budget tuner changes it live.",
    ),
    Panel(
        "Scheduler budget: max_num_batched_tokens",
        "short",
        (Query(f"paged_scheduler_max_num_batched_tokens{{{ENGINE}}}", "{{pod}}"),),
        "Current tokens-per-step budget; the operator's budget tuner changes it live.",
    ),
    Panel(
        "Finished requests by reason",
        "reqps",
        (
            Query(
                f"sum by (finished_reason) (rate(paged_request_success_total{{{ENGINE}}}[$__rate_interval]))",
                "{{finished_reason}}",
            ),
        ),
        "stop: a stop condition, length: max_tokens or the context, abort: cancelled or failed.",
        stack=True,
    ),
)

#: Operator series with a ModelDeployment's namespace arrive as ``exported_namespace`` unless the scrape
#: honours labels; the rules' ``paged_md:`` series already carry it as ``namespace``.
_SCRAPE_FAILURES = (
    'sum by (namespace) (label_replace(rate(paged_operator_scrape_failures_total[$__rate_interval]), "namespace", '
    '"$1", "exported_namespace", "(.+)"))'
)

FLEET_PANELS = (
    Panel(
        "Desired vs ready replicas per ModelDeployment",
        "short",
        (
            Query('paged_md:desired_replicas{namespace=~"$namespace"}', "{{namespace}}/{{name}} desired"),
            Query('paged_md:ready_replicas{namespace=~"$namespace"}', "{{namespace}}/{{name}} ready"),
            Query('paged_md:max_replicas{namespace=~"$namespace"}', "{{namespace}}/{{name}} max"),
        ),
        "Desired: what the operator set. Ready: pods passing readiness. Max: the autoscaler's bound.",
    ),
    Panel(
        "Replicas reporting metrics per model",
        "short",
        (Query(f"count by (namespace, model_name) (paged_engine_info{{{MODEL}}})", "{{namespace}}/{{model_name}}"),),
        "Engine pods whose /metrics Prometheus scrapes, per served model.",
    ),
    Panel(
        "Engine pods failing to report metrics",
        "short",
        (
            Query('count by (namespace) (up{job=~"$engine_job", namespace=~"$namespace"} == 0)', "{{namespace}} down"),
            Query(f"{_SCRAPE_FAILURES} * 60", "{{namespace}} operator scrape failures/min"),
        ),
        "Engine targets Prometheus cannot scrape, and ready pods the operator could not scrape (per minute).",
    ),
    Panel(
        "TTFT p95 vs SLO",
        "s",
        (
            Query(f"paged:time_to_first_token_seconds:p95_5m{{{MODEL}}}", "{{namespace}}/{{model_name}} p95"),
            Query(f"paged_md:ttft_slo_seconds{{{MODEL}}}", "{{namespace}}/{{model_name}} SLO"),
        ),
        "95th-percentile time to first token against the ModelDeployment's ttftP95Seconds target.",
    ),
    Panel(
        "Scaling and budget decisions by rule",
        "short",
        (
            Query(
                "sum by (kind, rule, dry_run) (increase(paged_operator_decisions_total[5m]))",
                "{{kind}} {{rule}} dry_run={{dry_run}}",
            ),
        ),
        "Decisions applied in the last 5 minutes, by kind and arbiter rule (R1–R6, see paged-ctl explain).",
        stack=True,
    ),
    Panel(
        "Reconcile rate",
        "ops",
        (
            Query(
                "sum by (handler, result) (rate(paged_operator_reconciles_total[$__rate_interval]))",
                "{{handler}} {{result}}",
            ),
        ),
        "ModelDeployment reconciles per second, by handler and result.",
    ),
    Panel(
        "Reconcile errors",
        "ops",
        (
            Query(
                "sum by (handler, error) (rate(paged_operator_reconcile_errors_total[$__rate_interval]))",
                "{{handler}} {{error}}",
            ),
        ),
        "Failed reconciles per second, by handler and exception type.",
    ),
    Panel(
        "Reconcile error ratio",
        "percentunit",
        (Query("paged:operator_reconcile_error_ratio:rate10m", "errors / reconciles"),),
        "Share of failed reconciles over 10 minutes; PagedOperatorReconcileErrors fires above 10 %.",
        max_value=1,
    ),
    Panel(
        "Reconcile duration",
        "s",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (handler, le) "
                "(rate(paged_operator_reconcile_duration_seconds_bucket[$__rate_interval])))",
                f"{{{{handler}}}} p{round(q * 100)}",
            )
            for q in QUANTILES
        ),
        "Time to reconcile one ModelDeployment.",
    ),
)

ENGINE_JOB_VARIABLE = {
    "name": "engine_job",
    "label": "Engine scrape job",
    "type": "textbox",
    "query": "paged-engine",
    "current": {"text": "paged-engine", "value": "paged-engine"},
    "hide": 0,
}

_ROUTER_RATE = 'sum by ({by}) (rate({name}{{namespace=~"$namespace", model_name=~"$model_name"}}[$__rate_interval]))'


def _router_rate(name: str, by: str) -> str:
    return _ROUTER_RATE.format(name=name, by=by)


#: The router row (``paged-router`` pods, ``spec.router``): where requests went and why, what waited and failed.
ROUTER_PANELS = (
    Panel(
        "Router: requests per second by reason",
        "reqps",
        (Query(_router_rate("paged_router_requests_total", "reason"), "{{reason}}"),),
        "Requests the router sent to a replica (retries included), by the policy's reason: prefix_hit, "
        "prefix_miss, load_bound (a hot prefix spilled), least_load, session, round_robin.",
        stack=True,
    ),
    Panel(
        "Router: requests per second by replica",
        "reqps",
        (Query(_router_rate("paged_router_requests_total", "replica"), "{{replica}}"),),
        "The spread over replicas: a line far above the others is a hot replica.",
    ),
    Panel(
        "Router: queue depth and queue time",
        "s",
        (
            Query(
                "histogram_quantile(0.95, "
                + _router_rate("paged_router_queue_time_seconds_bucket", "model_name, le")
                + ")",
                "{{model_name}} p95 wait",
            ),
            Query(
                'sum by (model_name) (paged_router_queue_depth{namespace=~"$namespace", model_name=~"$model_name"})',
                "{{model_name}} waiting now",
            ),
        ),
        "Requests held for a replica with room (or, at zero replicas, for the fleet to wake): time waited (p95) "
        "and how many wait now.",
    ),
    Panel(
        "Router: retries, refusals and broken streams per second",
        "reqps",
        (
            Query(_router_rate("paged_router_retries_total", "reason"), "retry {{reason}}"),
            Query(_router_rate("paged_router_rejected_requests_total", "reason"), "refused {{reason}}"),
            Query(_router_rate("paged_router_stream_errors_total", "replica"), "stream error {{replica}}"),
        ),
        "Retries on another replica before the first byte; requests refused (queue full or timed out, bad input); "
        "streams a replica broke mid-way.",
    ),
    Panel(
        "Router: estimated prefix hit ratio",
        "percentunit",
        (
            Query(
                _router_rate("paged_router_prefix_hits_total", "model_name")
                + " / ("
                + _router_rate("paged_router_prefix_queries_total", "model_name")
                + " > 0)",
                "{{model_name}}",
            ),
        ),
        "Prompt chunks the router believed cached on the replica it chose / chunks looked up (an estimate; the "
        "engines' own hit rate is on the engine dashboard).",
        max_value=1,
    ),
    Panel(
        "Router: cold starts from zero replicas",
        "s",
        (
            Query(
                "histogram_quantile(0.95, "
                + _router_rate("paged_router_cold_start_seconds_bucket", "model_name, le")
                + ")",
                "{{model_name}} p95",
            ),
        ),
        "From the arrival of a request that found no ready replica to its first byte: the wake-up a user waits.",
    ),
)

DASHBOARDS = (
    Dashboard(
        "paged-engine",
        "paged / Engine",
        "One paged engine per pod: KV cache, queues, latency, throughput, scheduler budgets.",
        ENGINE_PANELS,
    ),
    Dashboard(
        "paged-fleet",
        "paged / Fleet and operator",
        "ModelDeployments as the operator sees them: replicas, decisions, reconciles, pods not reporting metrics; "
        "and the router in front of them.",
        FLEET_PANELS + ROUTER_PANELS,
        (ENGINE_JOB_VARIABLE,),
    ),
)


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,  # on time-range change: pods come and go
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "sort": 1,
        "current": {"text": "All", "value": "$__all"},
        "hide": 0,
    }


def variables(extra: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        query_variable("namespace", "Namespace", "label_values(paged_engine_info, namespace)"),
        query_variable("model_name", "Model", 'label_values(paged_engine_info{namespace=~"$namespace"}, model_name)'),
        query_variable(
            "pod", "Pod", 'label_values(paged_engine_info{namespace=~"$namespace", model_name=~"$model_name"}, pod)'
        ),
        *extra,
    ]


def render_panel(panel: Panel, panel_id: int) -> dict[str, Any]:
    index = panel_id - 1
    per_row = GRID_COLUMNS // PANEL_WIDTH
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "min": 0,
        "custom": {"fillOpacity": 10, "stacking": {"mode": "normal" if panel.stack else "none"}},
    }
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {
            "h": PANEL_HEIGHT,
            "w": PANEL_WIDTH,
            "x": (index % per_row) * PANEL_WIDTH,
            "y": (index // per_row) * PANEL_HEIGHT,
        },
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend, "refId": chr(ord("A") + i)}
            for i, q in enumerate(panel.queries)
        ],
    }


def render(dashboard: Dashboard) -> dict[str, Any]:
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["paged"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "",
        "templating": {"list": variables(dashboard.extra_variables)},
        "annotations": {"list": []},
        "links": [],
        "panels": [render_panel(p, i) for i, p in enumerate(dashboard.panels, start=1)],
    }


def rendered_files() -> dict[Path, str]:
    return {OUT_DIR / f"{d.uid}.json": json.dumps(render(d), indent=2) + "\n" for d in DASHBOARDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed dashboard is stale")
    args = parser.parse_args(argv)
    stale = [path for path, text in rendered_files().items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path} (run python dashboards/generate.py)", file=sys.stderr)
        return 1 if stale else 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for path, text in rendered_files().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
