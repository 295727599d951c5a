"""``spec.tracing`` rendered into the engine and router containers (pure builders, no cluster): one rule for
both, nothing when off, the user's own variables win, and the flags parse with each program's own CLI."""

from __future__ import annotations

from typing import Any

from paged_engine.cli import build_parser
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_platform.api import ModelDeployment
from paged_platform.router.cli import parse_options

from tests.kubelet_env import container_environment

UID = "7f1c8d2e-0000-4000-8000-000000000003"
OTLP = {"exporter": "otlp", "endpoint": "http://otel-collector.observability:4317", "protocol": "grpc",
        "samplingRatio": 0.25}  # fmt: skip


def md(tracing: dict[str, Any] | None = None, **spec: Any) -> ModelDeployment:
    spec = {"router": {"enabled": True, **spec.pop("router", {})}, **spec}
    if tracing is not None:
        spec["tracing"] = tracing
    return ModelDeployment.model_validate({"metadata": {"name": "gemma", "namespace": "team-a"}, "spec": spec})


def engine(obj: ModelDeployment) -> dict[str, Any]:
    (container,) = children.deployment(obj, UID)["spec"]["template"]["spec"]["containers"]
    return container


def router(obj: ModelDeployment) -> dict[str, Any]:
    (container,) = router_children.router_deployment(obj, UID)["spec"]["template"]["spec"]["containers"]
    return container


def engine_flags(container: dict[str, Any]) -> Any:
    """The engine's parsed arguments."""
    return build_parser().parse_args(container["args"])


def otel(container: dict[str, Any], pod: str) -> dict[str, str]:
    env = container_environment(container.get("env", []), {"metadata.name": pod})
    return {k: v for k, v in env.items() if k.startswith("OTEL_")}


def test_tracing_off_renders_nothing_into_either_container() -> None:
    for obj in (md(), md({"exporter": "off", "endpoint": "http://c:4318"})):
        assert "--otel-exporter" not in engine(obj)["args"] and "--otel-exporter" not in router(obj)["args"]
        assert not [e for e in engine(obj)["env"] if e["name"].startswith(("OTEL_", "PAGED_POD"))]
        assert "env" not in router(obj)  # the router container is as before tracing existed


def test_otlp_renders_the_same_settings_into_the_engines_and_the_router() -> None:
    obj = md(OTLP)
    assert engine_flags(engine(obj)).otel_exporter == "otlp"
    assert parse_options(router(obj)["args"]).otel_exporter == "otlp"
    common = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    assert otel(engine(obj), "gemma-7d9f-abcde") == {
        **common,
        "OTEL_SERVICE_NAME": "gemma-engine",
        "OTEL_RESOURCE_ATTRIBUTES": "k8s.namespace.name=team-a,k8s.deployment.name=gemma,k8s.pod.name=gemma-7d9f-abcde",
    }
    assert otel(router(obj), "gemma-router-5c4b-fghij") == {
        **common,
        "OTEL_SERVICE_NAME": "gemma-router",
        "OTEL_RESOURCE_ATTRIBUTES": "k8s.namespace.name=team-a,k8s.deployment.name=gemma-router,"
        "k8s.pod.name=gemma-router-5c4b-fghij",
    }


def test_console_needs_no_collector_and_sets_no_otlp_variables() -> None:
    obj = md({"exporter": "console"})
    for container in (engine(obj), router(obj)):
        assert container["args"][-2:] == ["--otel-exporter", "console"]
        variables = otel(container, "p")
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in variables and "OTEL_EXPORTER_OTLP_PROTOCOL" not in variables
        assert variables["OTEL_TRACES_SAMPLER_ARG"] == "1.0"


def test_the_users_own_variables_win_and_no_name_is_set_twice() -> None:
    headers = {"name": "OTEL_EXPORTER_OTLP_HEADERS", "valueFrom": {"secretKeyRef": {"name": "otel", "key": "h"}}}
    obj = md(
        OTLP,
        pod={"env": [{"name": "OTEL_SERVICE_NAME", "value": "llm-gateway"}]},
        router={"env": [{"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"}, headers]},
    )
    engine_env, router_env = engine(obj)["env"], router(obj)["env"]
    for env in (engine_env, router_env):
        names = [e["name"] for e in env]
        assert len(names) == len(set(names)), names
    engine_values = {e["name"]: e.get("value") for e in engine_env}
    router_values = {e["name"]: e.get("value") for e in router_env}
    assert engine_values["OTEL_SERVICE_NAME"] == "llm-gateway"
    assert engine_values["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert router_values["OTEL_SERVICE_NAME"] == "gemma-router"
    assert router_values["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert headers in router_env


def test_an_exporter_in_extra_args_comes_last_and_wins() -> None:
    obj = md({"exporter": "console"}, engine={"extraArgs": ["--otel-exporter", "off"]})
    assert engine_flags(engine(obj)).otel_exporter == "off"
