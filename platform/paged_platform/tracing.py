"""The OpenTelemetry set-up the engine server and the router share: a tracer for ``--otel-exporter``.

``off`` installs nothing (a no-op tracer, so spans cost nothing); ``console`` prints spans; ``otlp`` sends them
to a collector. Everything else is the specification's standard variables (``tracing_contract``), read where the
specification says:

* **Protocol.** ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
  ``http/protobuf`` (the specification's default): picks the HTTP or the gRPC exporter. Any other value is a
  start-up error naming the variable, not a silent fallback.
* **Endpoint, headers, TLS, timeout.** ``OTEL_EXPORTER_OTLP_*``, read by the exporter itself (for HTTP the
  endpoint is a base URL; ``/v1/traces`` is appended).
* **Sampler.** ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, read by the SDK's ``TracerProvider``
  (default ``parentbased_always_on``).
* **service.name.** ``OTEL_SERVICE_NAME`` (or ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) when set, else the
  caller's default (``paged-engine``, ``paged-router``); the other resource attributes come from
  ``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import cast

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from paged_platform.tracing_contract import (
    DEFAULT_PROTOCOL,
    EXPORTERS,
    PROTOCOL_ENV,
    PROTOCOLS,
    TRACES_PROTOCOL_ENV,
    Exporter,
    OtlpProtocol,
)

__all__ = ["EXPORTERS", "Exporter", "configure_tracing", "otlp_protocol", "otlp_span_exporter"]

log = logging.getLogger(__name__)
#: The distribution each protocol's exporter ships in (named in the error when it is missing).
_PACKAGES: dict[OtlpProtocol, str] = {
    "grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "http/protobuf": "opentelemetry-exporter-otlp-proto-http",
}


def otlp_protocol(environ: Mapping[str, str]) -> OtlpProtocol:
    """The OTLP protocol for traces the environment selects; a bad value is a start-up error naming it."""
    for name in (TRACES_PROTOCOL_ENV, PROTOCOL_ENV):
        if value := environ.get(name, "").strip():
            if value not in PROTOCOLS:
                raise SystemExit(f"{name}={value!r} is not an OTLP protocol paged supports: use one of {PROTOCOLS}")
            return cast(OtlpProtocol, value)
    return DEFAULT_PROTOCOL


def otlp_span_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP exporter of the selected protocol (it reads its endpoint and options from the environment)."""
    protocol = otlp_protocol(environ)
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    except ImportError as exc:
        raise SystemExit(f"--otel-exporter otlp over {protocol} needs: pip install {_PACKAGES[protocol]}") from exc
    return OTLPSpanExporter()


def _resource(default_service_name: str) -> Resource:
    """The environment's resource attributes, with ``default_service_name`` where it names no service."""
    named = SERVICE_NAME in OTELResourceDetector().detect().attributes
    return Resource.create({} if named else {SERVICE_NAME: default_service_name})


def configure_tracing(exporter: Exporter, service_name: str, tracer_name: str) -> trace.Tracer:
    """A tracer exporting to ``exporter``; ``service_name`` is the default ``service.name``."""
    if exporter == "off":
        return trace.NoOpTracer()
    span_exporter = ConsoleSpanExporter() if exporter == "console" else otlp_span_exporter(os.environ)
    resource = _resource(service_name)
    provider = TracerProvider(resource=resource)  # no sampler given: the SDK reads OTEL_TRACES_SAMPLER(_ARG)
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    detail = f" over {otlp_protocol(os.environ)}" if exporter == "otlp" else ""
    log.info("%s: tracing enabled, exporter: %s%s, sampler: %s", resource.attributes[SERVICE_NAME], exporter, detail,
             provider.sampler.get_description())  # fmt: skip
    return provider.get_tracer(tracer_name)
