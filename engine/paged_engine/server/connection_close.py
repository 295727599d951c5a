"""While a replica is leaving, every response asks its client to close the connection.

A Service's proxy (kube-proxy) picks a replica per *connection*: once the leaving pod's endpoint is removed, new
connections go elsewhere, but a keep-alive connection opened earlier stays pinned here. ``Connection: close`` on
each response makes the client open its next connection through the Service again, i.e. to a replica that stays.
An idle connection is closed by the server's keep-alive timeout instead, so after lingering longer than that
timeout no client connection is left that could bring a new request here.

ASGI middleware: the header is added to the response start when ``closing()`` is true; everything else passes
through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Message = dict[str, Any]


class CloseConnectionsWhen:
    def __init__(self, app: Any, closing: Callable[[], bool]) -> None:
        self.app = app
        self.closing = closing

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.closing():
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)
