"""OpenTelemetry tracing: one span per engine request with the GenAI semantic-convention attributes.

Off by default (no provider is installed and spans are no-ops); the exporters: ``paged_platform.tracing``.
A request's span continues the trace context it arrived with (W3C ``traceparent``, e.g. the router's span):
``TraceContext`` makes it the current context while the request is handled.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context, propagate, trace
from paged_platform import tracing as shared_tracing
from paged_platform.tracing import Exporter


def configure_tracing(exporter: Exporter) -> trace.Tracer:
    """The engine server's tracer (a no-op one for ``off``)."""
    return shared_tracing.configure_tracing(exporter, "paged-engine", "paged_engine")


class RequestSpan:
    def __init__(self, tracer: trace.Tracer, operation: str, model: str, request_id: str, max_tokens: int) -> None:
        self._span = tracer.start_span(
            f"{operation} {model}",
            kind=trace.SpanKind.SERVER,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.system": "paged",
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.response.id": request_id,
                "gen_ai.request.max_tokens": max_tokens,
            },
        )

    def first_token(self, seconds: float) -> None:
        self._span.set_attribute("gen_ai.server.time_to_first_token", seconds)

    def end(self, finish_reason: str, input_tokens: int, output_tokens: int) -> None:
        self._span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        self._span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        self._span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
        self._span.end()


class TraceContext:
    """ASGI middleware: the trace context of each HTTP request's headers is the current one while it is served,
    so spans started for it (``RequestSpan``) are children of the caller's span."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        token = context.attach(propagate.extract(headers))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
