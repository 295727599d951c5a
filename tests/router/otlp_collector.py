"""A minimal OTLP trace collector on 127.0.0.1 for tests, over either protocol: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` (binary protobuf, gzip or not) for ``http/protobuf``, the ``TraceService/Export``
call for ``grpc``. Each span is kept with its resource's attributes."""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from paged_platform.tracing_contract import OtlpProtocol

PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    resource: dict[str, Any]
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]


def _attributes(pairs: Any) -> dict[str, Any]:
    def value(kv: KeyValue) -> Any:
        which = kv.value.WhichOneof("value")
        return None if which is None else getattr(kv.value, which)

    return {kv.key: value(kv) for kv in pairs}


class OtlpCollector:
    """Serves ``protocol`` while ``running()``; ``received()`` is every span so far, in arrival order."""

    def __init__(self, protocol: OtlpProtocol = "http/protobuf") -> None:
        self.protocol = protocol
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path != PATH:
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector.receive(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Servicer(TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                collector.receive(request)
                return ExportTraceServiceResponse()

        self._http: ThreadingHTTPServer | None = None
        self._grpc: grpc.Server | None = None
        if protocol == "grpc":
            self._grpc = grpc.server(ThreadPoolExecutor(max_workers=2))
            add_TraceServiceServicer_to_server(Servicer(), self._grpc)
            self._port = self._grpc.add_insecure_port("127.0.0.1:0")
        else:
            self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self._port = self._http.server_address[1]

    @property
    def endpoint(self) -> str:
        """The URL ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes (the HTTP exporter appends ``/v1/traces``; ``http://``
        makes the gRPC exporter connect without TLS)."""
        return f"http://127.0.0.1:{self._port}"

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def receive(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(ReceivedSpan(
                        service=resource.get("service.name", ""), resource=resource, name=span.name,
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                        attributes=_attributes(span.attributes),
                    ))  # fmt: skip
        with self._lock:
            self._spans.extend(found)

    @contextlib.contextmanager
    def running(self) -> Iterator[OtlpCollector]:
        if self._grpc is not None:
            self._grpc.start()
            try:
                yield self
            finally:
                self._grpc.stop(grace=1).wait(5)
            return
        assert self._http is not None
        thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._http.shutdown()
            self._http.server_close()
            thread.join(5)
