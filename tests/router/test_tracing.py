"""The router's own span: a child of the client's span, the parent of what the replica receives, with the routing
decision as attributes. The router runs in-process (spans into an in-memory exporter) against fake replicas."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from paged_platform.router.cli import create_app, parse_options
from starlette.testclient import TestClient

from tests.router.conftest import FAKE_MODEL, control, seen, wait_until

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def in_process_router(exporter: InMemorySpanExporter):  # type: ignore[no-untyped-def]
    @contextlib.contextmanager
    def make(endpoints: list[str], *extra: str) -> Iterator[TestClient]:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        argv = [*(a for url in endpoints for a in ("--endpoint", url)), "--probe-interval", "0.2", *extra]
        app = create_app(parse_options(argv), tracer=provider.get_tracer("test"))
        with TestClient(app) as client:
            wait_until(lambda: client.get("/router/replicas").json()["replicas"][0]["ready"])
            yield client

    return make


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = wait_until(lambda: exporter.get_finished_spans())  # type: ignore[misc]
    return span


@pytest.mark.parametrize("stream", [False, True])
def test_router_span_is_a_child_of_the_client_span_and_the_parent_of_the_upstream_request(
    fakes, in_process_router, exporter, stream
):
    (a,) = fakes(1)
    body = {"model": FAKE_MODEL, "prompt": "a shared system prompt. " * 12, "max_tokens": 2, "stream": stream}
    with in_process_router([a.url]) as client:
        for _ in range(2):  # the second finds the prompt's prefix where the first went
            assert client.post("/v1/completions", json=body, headers={"traceparent": TRACEPARENT}).status_code == 200
    first, span = wait_until(lambda: len(exporter.get_finished_spans()) == 2 and exporter.get_finished_spans())
    assert span.kind is SpanKind.SERVER
    assert span.name == "POST /v1/completions"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CLIENT_SPAN
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    # The replica received the router's span as its parent, in the client's trace.
    version, trace_id, parent_id, flags = seen(a)["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert parent_id == f"{span.context.span_id:016x}" != CLIENT_SPAN
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.request.model"] == FAKE_MODEL
    assert attributes["paged.router.replica"] == a.url
    assert attributes["paged.router.policy"] == "cache_aware"
    assert attributes["paged.router.reason"]
    assert attributes["paged.router.retries"] == 0
    assert attributes["paged.router.queue_time_s"] >= 0
    assert (first.attributes or {})["paged.router.prefix_hit"] == 0.0
    assert attributes["paged.router.prefix_hit"] == 1.0
    assert attributes["http.response.status_code"] == 200
    assert span.status.status_code is StatusCode.UNSET


def test_without_a_client_context_the_router_span_starts_the_trace(fakes, in_process_router, exporter):
    (a,) = fakes(1)
    with in_process_router([a.url]) as client:
        assert client.post("/v1/completions", json={"model": FAKE_MODEL, "prompt": "x"}).status_code == 200
    span = only_span(exporter)
    assert span.parent is None
    _, trace_id, parent_id, _ = seen(a)["traceparent"].split("-")
    assert (trace_id, parent_id) == (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")


def test_retries_and_the_relayed_refusal_are_on_the_span(fakes, in_process_router, exporter):
    a, b = fakes(2)
    control(a, status=503)
    control(b, status=503)
    with in_process_router([a.url, b.url]) as client:
        wait_until(lambda: all(r["ready"] for r in client.get("/router/replicas").json()["replicas"]))
        response = client.post("/v1/completions", json={"model": FAKE_MODEL, "prompt": "x"})
        assert response.status_code == 503
    span = only_span(exporter)
    attributes = dict(span.attributes or {})
    assert attributes["paged.router.retries"] == 1
    assert attributes["http.response.status_code"] == 503
    assert span.status.status_code is StatusCode.ERROR


def test_a_request_the_router_refuses_ends_its_span_with_the_reason(fakes, in_process_router, exporter):
    (a,) = fakes(1)
    with in_process_router([a.url]) as client:
        response = client.post("/v1/completions", json={"model": "no-such-model", "prompt": "x"})
        assert response.status_code == 404
    span = only_span(exporter)
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "unknown_model"
    assert attributes["http.response.status_code"] == 404
    assert span.status.status_code is StatusCode.UNSET  # a client error, not the router's
    assert seen(a)["requests"] == 0


def test_a_replica_dying_mid_stream_marks_the_span_failed(fakes, in_process_router, exporter):
    (a,) = fakes(1)
    with in_process_router([a.url]) as client:
        control(a, die_after_chunks=1)
        body = {"model": FAKE_MODEL, "prompt": "x", "max_tokens": 4, "stream": True}
        response = client.post("/v1/completions", json=body)
        assert response.status_code == 200 and "failed mid-stream" in response.text
    span = only_span(exporter)
    assert (span.attributes or {})["error.type"] == "stream_error"
    assert span.status.status_code is StatusCode.ERROR
