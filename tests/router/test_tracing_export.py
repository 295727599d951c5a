"""Traces leave the processes as a cluster configures them: a real ``paged-router`` and a real ``paged-engine serve``
(tiny random Gemma 3), each started with the flag and the OTEL_* variables the operator renders for
``spec.tracing`` into its container, export over OTLP/HTTP to a collector in this test. A completion with the
client's ``traceparent`` arrives as the router's span (a child of the client's) and the engine's (a child of the
router's), in the client's trace, each under its service name; with ``samplingRatio: 0`` a request that starts
its own trace is dropped by both (the parent-based sampler follows the router's decision into the engine). Over
gRPC, the router alone in front of a fake replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_platform.api import ModelDeployment

from tests.kubelet_env import container_environment
from tests.router.conftest import FAKE_MODEL, Proc, replica_states, seen, start_router, wait_until
from tests.router.otlp_collector import OtlpCollector
from tests.server.conftest import COMMON_ARGS, MODEL_NAME, start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]
UID = "7f1c8d2e-0000-4000-8000-000000000004"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER


def rendered(container: dict[str, Any], pod: str) -> tuple[list[str], dict[str, str]]:
    """The container's ``--otel-exporter`` flag and the tracing variables it starts with in pod ``pod``; the
    exporter's batch delay is shortened so that spans arrive within the test, not after 5 s."""
    args = container["args"]
    at = args.index("--otel-exporter")
    env = container_environment(container["env"], {"metadata.name": pod})
    tracing = {k: v for k, v in env.items() if k.startswith("OTEL_")}
    return args[at : at + 2], {**tracing, "OTEL_BSP_SCHEDULE_DELAY": "50"}


def traced_deployment(collector: OtlpCollector, ratio: float) -> ModelDeployment:
    tracing = {"exporter": "otlp", "endpoint": collector.endpoint, "protocol": collector.protocol,
               "samplingRatio": ratio}  # fmt: skip
    spec = {"router": {"enabled": True}, "tracing": tracing}
    return ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": spec})


def router_container(md: ModelDeployment) -> dict[str, Any]:
    (container,) = router_children.router_deployment(md, UID)["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.slow
def test_router_and_engine_spans_reach_an_otlp_collector_in_one_trace(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    started: list[Proc] = []
    with OtlpCollector("http/protobuf").running() as collector:
        md = traced_deployment(collector, ratio=0)
        (engine_container,) = children.deployment(md, UID)["spec"]["template"]["spec"]["containers"]
        try:
            flag, env = rendered(engine_container, "gemma-6b7c-engine0")
            engine = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, *flag, env=env)
            started.append(engine)
            flag, env = rendered(router_container(md), "gemma-router-5d4f-router0")
            router = start_router(tmp_path, [engine.url], *flag, env=env)
            started.append(router)
            wait_until(lambda: all(r["ready"] for r in replica_states(router).values()))

            body = {"model": MODEL_NAME, "prompt": "Trace me", "max_tokens": 3, "ignore_eos": True}
            untraced = httpx.post(f"{router.url}/v1/completions", json=body, timeout=60)
            assert untraced.status_code == 200  # starts its own trace, not sampled at ratio 0
            traced = httpx.post(f"{router.url}/v1/completions", json=body, timeout=60,
                                headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})  # fmt: skip
            assert traced.status_code == 200
            wait_until(lambda: len(collector.received()) >= 2, timeout=30)
        finally:
            for proc in reversed(started):  # a clean exit flushes whatever either exporter still holds
                proc.stop()
        spans = {span.service: span for span in collector.received()}
        assert len(collector.received()) == 2, collector.received()

    router_span, engine_span = spans["gemma-router"], spans["gemma-engine"]
    assert (router_span.trace_id, engine_span.trace_id) == (TRACE_ID, TRACE_ID)
    assert router_span.parent_span_id == CLIENT_SPAN
    assert engine_span.parent_span_id == router_span.span_id
    assert router_span.kind == engine_span.kind == SERVER_KIND
    assert router_span.name == "POST /v1/completions" and engine_span.name == f"text_completion {MODEL_NAME}"
    assert router_span.attributes["paged.router.replica"] == engine.url
    assert engine_span.attributes["gen_ai.usage.output_tokens"] == 3
    assert router_span.resource["k8s.pod.name"] == "gemma-router-5d4f-router0"
    assert engine_span.resource["k8s.pod.name"] == "gemma-6b7c-engine0"
    assert engine_span.resource["k8s.deployment.name"] == "gemma"
    assert engine_span.resource["k8s.namespace.name"] == "team-a"


def test_the_router_exports_over_grpc(fakes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (replica,) = fakes(1)
    with OtlpCollector("grpc").running() as collector:
        flag, env = rendered(router_container(traced_deployment(collector, ratio=1)), "gemma-router-0")
        router = start_router(tmp_path, [replica.url], *flag, env=env)
        try:
            wait_until(lambda: all(r["ready"] for r in replica_states(router).values()))
            body = {"model": FAKE_MODEL, "prompt": "x", "max_tokens": 2}
            headers = {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}
            assert httpx.post(f"{router.url}/v1/completions", json=body, headers=headers, timeout=30).status_code == 200
            (span,) = wait_until(collector.received, timeout=30)  # type: ignore[misc]
        finally:
            router.stop()
    assert (span.service, span.trace_id, span.parent_span_id) == ("gemma-router", TRACE_ID, CLIENT_SPAN)
    assert seen(replica)["traceparent"] == f"00-{TRACE_ID}-{span.span_id}-01"
