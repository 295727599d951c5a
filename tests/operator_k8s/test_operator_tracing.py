"""``spec.tracing`` on the real API server: the operator, as the chart's ServiceAccount, renders the exporter flag
and the standard OTEL_* variables into the engine and the router Deployments alike (the user's own variable
winning), and takes them out again when tracing is turned off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s
TRACING = {"exporter": "otlp", "endpoint": "http://otel-collector.observability:4318", "samplingRatio": 0.1}


def container(client: KubeClient, ns: str, deployment: str) -> dict[str, Any]:
    (only,) = client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{deployment}")["spec"]["template"]["spec"][
        "containers"
    ]
    return only


def otel_values(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if e["name"].startswith("OTEL_")}


def test_tracing_reaches_the_engines_and_the_router_and_leaves_when_turned_off(
    kube_admin: KubeClient,
    kube_namespace: str,
    chart_access: ServiceAccountAccess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = kube_namespace
    monkeypatch.setenv("PAGED_ROUTER_CLUSTER_ROLE", "test-paged-router")  # as the chart sets it on the operator
    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path).start()
    try:
        spec = {"router": {"enabled": True}, "tracing": TRACING,
                "pod": {"env": [{"name": "OTEL_SERVICE_NAME", "value": "llm-backend"}]}}  # fmt: skip
        kube_admin.create(md_path(ns), model_deployment("gemma", **spec))
        wait_for("both Deployments", lambda: kube_admin.exists(f"/apis/apps/v1/namespaces/{ns}/deployments/gemma")
                 and kube_admin.exists(f"/apis/apps/v1/namespaces/{ns}/deployments/gemma-router"), 60)  # fmt: skip
        engine, router = container(kube_admin, ns, "gemma"), container(kube_admin, ns, "gemma-router")
        for c in (engine, router):
            args = c["args"]
            assert args[args.index("--otel-exporter") + 1] == "otlp"
            assert {"name": "PAGED_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                    "fieldPath": "metadata.name"}}} in c["env"]  # fmt: skip
        shared = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.1",
        }
        assert otel_values(engine) == {
            **shared,
            "OTEL_SERVICE_NAME": "llm-backend",  # the user's pod.env, set once
            "OTEL_RESOURCE_ATTRIBUTES": f"k8s.namespace.name={ns},k8s.deployment.name=gemma,"
            "k8s.pod.name=$(PAGED_POD_NAME)",
        }
        assert otel_values(router) == {
            **shared,
            "OTEL_SERVICE_NAME": "gemma-router",
            "OTEL_RESOURCE_ATTRIBUTES": f"k8s.namespace.name={ns},k8s.deployment.name=gemma-router,"
            "k8s.pod.name=$(PAGED_POD_NAME)",
        }

        kube_admin.patch(md_path(ns, "gemma"), {"spec": {"tracing": {"exporter": "off"}}})

        def untraced() -> bool:
            engine, router = container(kube_admin, ns, "gemma"), container(kube_admin, ns, "gemma-router")
            return "--otel-exporter" not in engine["args"] + router["args"] and "env" not in router

        wait_for("tracing removed from both Deployments", untraced, 60)
        assert otel_values(container(kube_admin, ns, "gemma")) == {"OTEL_SERVICE_NAME": "llm-backend"}
    finally:
        operator.stop()
