"""``paged-operator run --prometheus-url``: the control loop reads the fleet's engine series from a Prometheus server's
query API instead of each pod's /metrics (a stand-in Prometheus in-process), and decides on what it holds."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from paged_operator import handlers
from paged_operator.cli import build_parser
from paged_operator.clients.kube import KubeApi
from paged_operator.control_loop import ControlLoop
from paged_operator.shared import Options, Shared
from paged_platform.engine_contract.budgets import resolve_budgets

from tests.operator.operator_cluster import Cluster

PROMETHEUS = "http://prometheus.monitoring:9090"
DEFAULT = resolve_budgets(None, None, device_type="cpu", serving=True)
SPEC: dict[str, Any] = {
    "replicas": {"min": 1, "max": 4},
    "autoscaling": {
        "intervalSeconds": 5,
        "targets": {"kvCacheUsage": 0.5},
        "scaleUp": {"stabilizationWindowSeconds": 0},
    },
}


class Prometheus:
    """``/api/v1/query``: an instant vector per series name, for the pods of namespace ``ns`` it has series of."""

    def __init__(self, now: list[float], kv: dict[str, float]) -> None:
        self.now, self.queries = now, list[str]()
        self.series: dict[str, dict[str, float]] = {
            "paged_kv_cache_usage_ratio": kv,
            "paged_requests_running": {pod: 12.0 for pod in kv},
            "paged_requests_waiting": {pod: 0.0 for pod in kv},
            "paged_preemptions_total": {pod: 0.0 for pod in kv},
            # the budgets a default spec starts with: nothing to push
            "paged_scheduler_max_num_seqs": {pod: float(DEFAULT.max_num_seqs) for pod in kv},
            "paged_scheduler_max_num_batched_tokens": {pod: float(DEFAULT.max_num_batched_tokens) for pod in kv},
        }

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        promql = request.url.params["query"]
        self.queries.append(promql)
        name = promql.split("{", 1)[0]
        result = [{"metric": {"__name__": name, "namespace": "ns", "pod": pod}, "value": [self.now[0], str(value)]}
                  for pod, value in self.series.get(name, {}).items()]  # fmt: skip
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})


class Network:
    """Prometheus by its address; every other one is an engine pod, which answers /ready and nothing else."""

    def __init__(self, prometheus: Prometheus) -> None:
        self.prometheus, self.pod_calls = prometheus, list[str]()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if f"{request.url.scheme}://{request.url.host}:{request.url.port}" == PROMETHEUS:
            return self.prometheus.handle(request)
        if request.url.path == "/ready":
            return httpx.Response(200, json={"ready": True})
        self.pod_calls.append(request.url.path)
        return httpx.Response(500, text="not expected")


async def test_the_decision_is_made_on_the_series_prometheus_holds() -> None:
    body = {
        "apiVersion": "paged.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": 1, "resourceVersion": "7"},
        "spec": SPEC,
    }
    cluster, now = Cluster("m"), [1_800_000_000.0]
    prometheus = Prometheus(now, kv={"p1": 0.95, "p2": 0.85})
    network = Network(prometheus)
    options = Options(token_key=b"k" * 32, prometheus_url=PROMETHEUS)
    shared = Shared(options=options, clock=lambda: now[0])
    shared._kube = KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(cluster.handle)))
    shared._http = httpx.AsyncClient(transport=httpx.MockTransport(network.handle))
    loop = ControlLoop(shared, reads=cluster)

    await loop.tick(handlers.parse(body), body)
    await shared.aclose()

    # KV usage 0.9 on 2 replicas against a target of 0.5 asks for 3.6: 4 replicas.
    (scaled,) = cluster.writes_to("/deployments/m")
    assert scaled["spec"]["replicas"] == 4
    status = cluster.writes_to("/modeldeployments/m/status")[-1]["status"]
    assert status["metrics"]["kvCacheUsage"] == pytest.approx(0.9) and status["readyReplicas"] == 2
    (decision,) = status["decisions"]
    assert decision["to"] == {"replicas": 4} and "kv_cache_usage 0.9 > target 0.5 on 2 replicas" in decision["reason"]
    assert network.pod_calls == []  # no /metrics scraped (and no budget to push)
    assert prometheus.queries and all(q.endswith('{namespace="ns",pod=~"p1|p2"}') for q in prometheus.queries)


def test_the_command_line_takes_an_http_url() -> None:
    key = ["--token-key-file", "/k"]
    args = build_parser().parse_args(["run", "-A", *key, "--prometheus-url", PROMETHEUS, "--prometheus-timeout", "3"])
    assert (args.prometheus_url, args.prometheus_timeout) == (PROMETHEUS, 3.0)
    assert build_parser().parse_args(["run", "-A", *key]).prometheus_url is None  # default: scrape the pods
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-A", *key, "--prometheus-url", "prometheus:9090"])
