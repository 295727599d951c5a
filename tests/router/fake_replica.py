"""A stand-in engine replica for router tests, run as its own process: ``python fake_replica.py PORT NAME [HOST]``.

It speaks just enough of the engine's surface (``/ready``, ``/metrics`` with ``model_name`` labels and
``paged_served_model_info``, ``/v1/models``, streamed and plain completions and Anthropic messages, the tokenizer
routes) and can be told through ``POST /control`` to drain, to refuse with a status, to stream slowly, to die
mid-stream or to serve LoRA adapters (``adapters``: their names), so failures the real engine cannot be forced
into on cue are testable. ``GET /control`` reports what it saw (requests, streams cut off by the client, trace headers).
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
control = {"draining": False, "status": 200, "chunk_delay": 0.0, "die_after_chunks": None, "waiting": 0,
           "adapters": []}  # fmt: skip
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
    for name in [MODEL, *control["adapters"]]:
        text += f'paged_served_model_info{{model_name="{MODEL}",served_model_name="{name}"}} 1.0\n'
    return Response(text, media_type="text/plain")


async def models(_: Request) -> Response:
    names = [MODEL, *control["adapters"]]
    return JSONResponse({"object": "list", "data": [{"id": n, "object": "model", "owned_by": NAME} for n in names]})


def _record(request: Request, body: dict) -> Response | None:
    """Counts the request; the refusal the controls ask for, if any."""
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
    return None


async def messages(request: Request) -> Response:
    """Anthropic's Messages API: the text is the replica's name, streamed as the engine's events."""
    body = await request.json()
    if (refused := _record(request, body)) is not None:
        return refused
    message = {"id": "msg-fake", "type": "message", "role": "assistant", "model": body["model"], "content": [],
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 1, "output_tokens": 0}}  # fmt: skip
    if not body.get("stream"):
        done = {"stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}
        return JSONResponse({**message, **done, "content": [{"type": "text", "text": NAME}]})

    def event(name: str, data: dict) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    async def stream():  # type: ignore[no-untyped-def]
        yield event("message_start", {"message": message})
        yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        for index in range(int(body.get("max_tokens") or 4)):
            if control["die_after_chunks"] is not None and index >= control["die_after_chunks"]:
                os._exit(1)
            text = NAME if index == 0 else ""
            yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
            await asyncio.sleep(control["chunk_delay"])
        yield event("content_block_stop", {"index": 0})
        yield event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": 1}})  # fmt: skip
        yield event("message_stop", {})

    return StreamingResponse(stream(), media_type="text/event-stream")


async def tokenize(request: Request) -> Response:
    """One token per character of the prompt, so a test can check the answer."""
    body = await request.json()
    if (refused := _record(request, body)) is not None:
        return refused
    tokens = [ord(c) for c in body.get("prompt", "")]
    return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": 1024})


async def detokenize(request: Request) -> Response:
    body = await request.json()
    if (refused := _record(request, body)) is not None:
        return refused
    return JSONResponse({"prompt": "".join(chr(t) for t in body["tokens"])})


def _chunk(index: int) -> bytes:
    body = {"id": "cmpl-fake", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": NAME if index == 0 else "", "finish_reason": None}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


async def completions(request: Request) -> Response:
    body = await request.json()
    if (refused := _record(request, body)) is not None:
        return refused
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
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]), Route("/detokenize", detokenize, methods=["POST"]),
        Route("/control", get_control, methods=["GET"]), Route("/control", set_control, methods=["POST"]),
    ]
)  # fmt: skip

if __name__ == "__main__":
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"  # a pod's loopback IP on the test bed
    uvicorn.run(app, host=host, port=int(sys.argv[1]), log_level="warning")
