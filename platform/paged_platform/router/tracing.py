"""OpenTelemetry for the router: one SERVER span per proxied request, between the client's span and the engine's.

* **Parent.** The span continues the trace context the client sent (W3C ``traceparent`` / ``tracestate``, or
  whatever ``OTEL_PROPAGATORS`` selects); without one it starts a trace.
* **Child.** The replica receives the *router's* span context in place of the client's, so the engine's span
  (which continues the context it receives) is a child of the router's. With tracing off there is no span
  and the client's headers pass unchanged (no parsing or injecting per request): the engine then continues
  the client's span directly, as without a router.
* **Attributes.** The model, the chosen replica, the policy and its reason, retries, the time spent waiting
  for a replica with room and the estimated prefix hit; the status the client got, and ``error.type`` (the
  router's reason) when the router refused the request or the replica failed mid-stream.

Exporters as the engine's (``paged_platform.tracing``).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from paged_platform import tracing as shared_tracing
from paged_platform.tracing import EXPORTERS, Exporter

__all__ = ["EXPORTERS", "Exporter", "RouteSpan", "configure_tracing"]

SERVICE_NAME = "paged-router"


def configure_tracing(exporter: Exporter) -> trace.Tracer:
    """The router's tracer (a no-op one for ``off``)."""
    return shared_tracing.configure_tracing(exporter, SERVICE_NAME, "paged_platform.router")


class RouteSpan:
    """The span of one proxied request, from its arrival to the last byte relayed (or the router's refusal)."""

    def __init__(self, tracer: trace.Tracer, method: str, path: str, headers: Mapping[str, str]) -> None:
        self._ended = False
        self._context: Context | None = None
        if isinstance(tracer, trace.NoOpTracer):  # tracing off: no span, the client's context passes unchanged
            self._span: trace.Span = trace.INVALID_SPAN
            return
        parent = propagate.extract(headers)
        self._span = tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        )
        self._context = trace.set_span_in_context(self._span, parent)  # keeps the client's baggage

    def upstream_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` with the client's trace context replaced by this span's (unchanged with tracing off)."""
        if self._context is None:
            return headers
        fields = {f.lower() for f in propagate.get_global_textmap().fields}
        carrier = {k: v for k, v in headers.items() if k.lower() not in fields}
        propagate.inject(carrier, context=self._context)
        return carrier

    def model(self, name: str) -> None:
        self._span.set_attribute("gen_ai.request.model", name)

    def routed(
        self, *, replica: str, policy: str, reason: str, retries: int, queue_s: float, prefix_hit: float | None
    ) -> None:
        span = self._span
        span.set_attribute("paged.router.replica", replica)
        span.set_attribute("paged.router.policy", policy)
        span.set_attribute("paged.router.reason", reason)
        span.set_attribute("paged.router.retries", retries)
        span.set_attribute("paged.router.queue_time_s", queue_s)
        if prefix_hit is not None:
            span.set_attribute("paged.router.prefix_hit", prefix_hit)

    def responded(self, code: int) -> None:
        """The status the client got; 5xx marks the span failed (4xx are the client's, as HTTP semconv says)."""
        self._span.set_attribute("http.response.status_code", code)
        if code >= 500:
            self._span.set_status(Status(StatusCode.ERROR))

    def refused(self, code: int, error_type: str, description: str) -> None:
        """The router answered itself: ``error_type`` is its reason (``queue_full``, ``unknown_model``, ...)."""
        self._span.set_attribute("error.type", error_type)
        self._span.set_attribute("http.response.status_code", code)
        if code >= 500:
            self._span.set_status(Status(StatusCode.ERROR, description))

    def failed(self, error_type: str, description: str) -> None:
        """The response broke off after its status line (the replica failed mid-stream)."""
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, description))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()
