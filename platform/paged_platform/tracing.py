"""The OpenTelemetry set-up the engine server and the router share: a tracer for ``--otel-exporter``.

``off`` installs nothing (a no-op tracer, so spans cost nothing); ``console`` prints spans; ``otlp`` sends them to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the standard ``OTEL_EXPORTER_OTLP_*`` variables configure it) when the OTLP
exporter package is installed, and is a start-up error naming the package otherwise.
"""

from __future__ import annotations

import logging
from typing import Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

log = logging.getLogger(__name__)
Exporter = Literal["off", "console", "otlp"]
EXPORTERS: tuple[Exporter, ...] = ("off", "console", "otlp")


def configure_tracing(exporter: Exporter, service_name: str, tracer_name: str) -> trace.Tracer:
    """A tracer exporting to ``exporter`` under ``service.name`` = ``service_name``."""
    if exporter == "off":
        return trace.NoOpTracer()
    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise SystemExit(
                "--otel-exporter otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp"
            ) from exc
        span_exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    log.info("%s: tracing enabled, exporter: %s", service_name, exporter)
    return provider.get_tracer(tracer_name)
