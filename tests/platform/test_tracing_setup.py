"""``configure_tracing``: the OTLP exporter the protocol variables select, the sampler and service name the standard
variables set, and a clear start-up error for a protocol paged does not speak."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import Tracer
from paged_platform.tracing import configure_tracing, otlp_protocol, otlp_span_exporter

OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME",
                  "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_the_protocol_defaults_to_http_protobuf_and_the_traces_variable_wins() -> None:
    assert otlp_protocol({}) == "http/protobuf"
    assert otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    both = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert otlp_protocol(both) == "http/protobuf"
    assert isinstance(otlp_span_exporter({}), HttpExporter)
    assert isinstance(otlp_span_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), GrpcExporter)


def test_an_unsupported_protocol_is_a_start_up_error_naming_the_variable() -> None:
    with pytest.raises(SystemExit, match=r"OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not an OTLP protocol"):
        otlp_span_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_the_sampler_and_service_name_come_from_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    default = configure_tracing("console", "paged-router", "test")
    assert isinstance(default, Tracer)
    assert default.resource.attributes["service.name"] == "paged-router"
    assert default.sampler.get_description().startswith("ParentBased{root:AlwaysOnSampler")

    monkeypatch.setenv("OTEL_SERVICE_NAME", "gemma-router")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name=team-a,k8s.pod.name=gemma-router-0")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    tracer = configure_tracing("otlp", "paged-router", "test")
    assert isinstance(tracer, Tracer)
    attributes = tracer.resource.attributes
    assert (attributes["service.name"], attributes["k8s.pod.name"]) == ("gemma-router", "gemma-router-0")
    assert tracer.sampler.get_description().startswith("ParentBased{root:TraceIdRatioBased{0.25}")


def test_a_service_name_in_the_resource_attributes_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=gateway")
    tracer = configure_tracing("console", "paged-engine", "test")
    assert isinstance(tracer, Tracer) and tracer.resource.attributes["service.name"] == "gateway"
