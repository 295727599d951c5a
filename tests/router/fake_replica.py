"""A stand-in engine replica for router tests, run as its own process: ``python fake_replica.py PORT NAME [HOST]``.

It speaks just enough of the engine's surface (``/ready``, ``/metrics`` with ``model_name`` labels,
``/v1/models``, streamed and plain completions) and can be told through ``POST /control`` to drain, to refuse
with a status, to stream slowly or to die mid-stream, so failures the real engine cannot be forced into on
cue are testable. ``GET /control`` reports what it saw (requests, streams cut off by the client, trace headers).
Every completion's text is the replica's name, so a test can tell who answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "fake-model"
NAME = sys.argv[2] if len(sys.argv) > 2 else "fake"
control = {"draining": False, "status": 200, "chunk_delay": 0.0, "die_after_chunks": None, "waiting": 0}
seen = {"requests": 0, "client_gone": 0, "traceparent": None, "authorization": None, "bodies": []}


async def ready(_: Request) -> Response:
    if control["draining"]:
        return JSONResponse({"ready": False, "reason": "draining"}, status_code=503)
    return JSONResponse({"ready": True})


async def metrics(_: Request) -> Response:
    text = (
        f'paged_requests_waiting{{model_name="{MODEL}"}} {control["waiting"]}\n'
        f'paged_kv_cache_usage_ratio{{model_name="{MODEL}"}} 0.25\n'
    )
    return Response(text, media_type="text/plain")


async def models(_: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": NAME}]})


def _chunk(index: int) -> bytes:
    body = {"id": "cmpl-fake", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": NAME if index == 0 else "", "finish_reason": None}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


async def completions(request: Request) -> Response:
    body = await request.json()
    seen["requests"] += 1
    seen["traceparent"] = request.headers.get("traceparent")
    seen["authorization"] = request.headers.get("authorization")
    seen["bodies"].append(body)
    if control["draining"]:
        error = {"message": "draining", "type": "unavailable_error", "param": None, "code": 503}
        return JSONResponse({"error": error}, status_code=503)
    if control["status"] != 200:
        error = {"message": "refused", "type": "unavailable_error", "param": None, "code": control["status"]}
        return JSONResponse({"error": error}, status_code=control["status"])
    chunks = int(body.get("max_tokens") or 4)
    if not body.get("stream"):
        await asyncio.sleep(control["chunk_delay"] * chunks)
        choice = {"index": 0, "text": NAME, "finish_reason": "length"}
        return JSONResponse({"id": "cmpl-fake", "object": "text_completion", "model": MODEL, "choices": [choice]})

    async def stream():  # type: ignore[no-untyped-def]
        try:
            for index in range(chunks):
                if control["die_after_chunks"] is not None and index >= control["die_after_chunks"]:
                    os._exit(1)  # the process dies with the connection open: no final chunk, no [DONE]
                yield _chunk(index)
                await asyncio.sleep(control["chunk_delay"])
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            seen["client_gone"] += 1
            raise

    return StreamingResponse(stream(), media_type="text/event-stream")


async def get_control(_: Request) -> Response:
    return JSONResponse(seen)


async def set_control(request: Request) -> Response:
    control.update(await request.json())
    return JSONResponse(control)


app = Starlette(
    routes=[
        Route("/ready", ready), Route("/metrics", metrics), Route("/v1/models", models),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/control", get_control, methods=["GET"]), Route("/control", set_control, methods=["POST"]),
    ]
)  # fmt: skip

if __name__ == "__main__":
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"  # a pod's loopback IP on the test bed
    uvicorn.run(app, host=host, port=int(sys.argv[1]), log_level="warning")
