"""Tracing: with the console exporter, each request ends as one span with the GenAI attributes, a child of the
span named by the request's ``traceparent`` (a router's or a client's)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server.conftest import COMMON_ARGS, MODEL_NAME, start_server, wait_for

pytestmark = [pytest.mark.server, pytest.mark.gemma]


def test_console_exporter_prints_a_genai_span_per_request(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS, "--otel-exporter", "console")
    try:
        body = {"model": MODEL_NAME, "prompt": "Trace me", "max_tokens": 5, "ignore_eos": True}
        traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        response = httpx.post(
            f"{server.url}/v1/completions", json=body, headers={"traceparent": traceparent}, timeout=60
        )
        assert response.status_code == 200
        log = wait_for(lambda: server.log() if '"gen_ai.usage.output_tokens": 5' in server.log() else None)
    finally:
        server.stop()
    assert f'"name": "text_completion {MODEL_NAME}"' in log
    assert '"trace_id": "0x0af7651916cd43dd8448eb211c80319c"' in log
    assert '"parent_id": "0xb7ad6b7169203331"' in log
    for attribute in ('"gen_ai.request.model": "tiny-gemma"', '"gen_ai.usage.input_tokens": 3',
                      '"gen_ai.response.finish_reasons": [', '"gen_ai.server.time_to_first_token"'):  # fmt: skip
        assert attribute in log, attribute


def test_tracing_is_off_by_default(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(tiny_gemma_dir, tmp_path, *COMMON_ARGS)
    try:
        body = {"model": MODEL_NAME, "prompt": "No trace", "max_tokens": 2}
        assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).status_code == 200
    finally:
        server.stop()
    assert "gen_ai." not in server.log()
