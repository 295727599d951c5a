"""What the engine, the router and the operator agree on about tracing: the exporter choices (``--otel-exporter``),
the OTLP protocols, and the standard OpenTelemetry variables the operator sets and the processes read.

No OpenTelemetry import here: the API types (``spec.tracing``) and the operator use these names without loading
the SDK. The variables are the specification's own (the SDK and its exporters read them), so a user who sets one
by hand gets the same effect as the operator setting it.
"""

from __future__ import annotations

from typing import Literal, get_args

Exporter = Literal["off", "console", "otlp"]
EXPORTERS: tuple[Exporter, ...] = get_args(Exporter)
OtlpProtocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[OtlpProtocol, ...] = get_args(OtlpProtocol)
#: The specification's default (``OTEL_EXPORTER_OTLP_PROTOCOL`` unset); a collector listens for it on 4318.
DEFAULT_PROTOCOL: OtlpProtocol = "http/protobuf"

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
#: Takes precedence over ``PROTOCOL_ENV`` for traces (the specification's per-signal override).
TRACES_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
RESOURCE_ATTRIBUTES_ENV = "OTEL_RESOURCE_ATTRIBUTES"
SAMPLER_ENV = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_ENV = "OTEL_TRACES_SAMPLER_ARG"
#: Follows the parent's decision when a request carries one; samples this ratio of the traces it starts.
PARENT_BASED_RATIO = "parentbased_traceidratio"
