"""A request body over the size limit is refused with 413 before it is read into memory or parsed.

ASGI middleware: a declared ``Content-Length`` over the limit is answered at once; a chunked body is read here
and refused the moment it passes the limit, so a client can't make the server buffer more than the limit (the
OpenAI error envelope names it).
"""

from __future__ import annotations

from typing import Any

from paged_engine.server.errors import error_response

Scope = dict[str, Any]
Message = dict[str, Any]


class BodySizeLimit:
    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                await self._refuse(scope, receive, send)
            else:  # the server reads at most the declared length
                await self.app(scope, receive, send)
            return
        # No declared length (chunked): read it here, at most the limit, then hand it on.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Any, send: Any) -> None:
        message = (
            f"the request body is larger than this server's limit of {self.max_bytes} bytes (--max-request-body-bytes)"
        )
        await error_response(413, message, "invalid_request_error")(scope, receive, send)
