"""What the API server's routes share: the engine client, the metrics, the serving front-end once the model is
loaded, the engine's description, and the bearer-token guards of ``/v1`` and ``/admin``."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from paged_engine.server.data_parallel import EngineCores
from paged_engine.server.errors import ANTHROPIC_PATHS, APIError
from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.serving import Serving
from paged_engine.wire import EngineInfo, LoraInfo


class ServerState:
    """``serving`` and ``info`` are None while the model loads: the port is open (liveness answers) but
    ``/ready`` is false and API calls get 503."""

    def __init__(self, client: EngineCores, metrics: EngineMetrics, api_key: str | None, admin_token: str | None):
        self.client = client
        self.metrics = metrics
        self.api_key = api_key
        self.admin_token = admin_token
        self.serving: Serving | None = None
        self.info: EngineInfo | None = None
        self.loras: list[LoraInfo] = []  # the adapters loaded now (the admin API keeps it current)
        #: Set when a drain begins (the pod is leaving): responses then close their connections
        #: (``connection_close``), so keep-alive clients reconnect through the Service to another replica.
        self.closing_connections = False
        #: Counts drain and undrain calls, so a drain still lingering when an undrain came does not stop admission.
        self.drain_calls = 0

    def ready_serving(self) -> Serving:
        if self.serving is None:
            if self.client.dead:
                raise APIError(503, "the engine is not running", type="unavailable_error")
            raise APIError(503, "the model is still loading", type="unavailable_error", headers={"Retry-After": "5"})
        return self.serving


def bearer_guard(token: str | None, what: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency refusing requests without ``Authorization: Bearer <token>`` (or Anthropic's ``x-api-key``
    on its paths); None: no token required."""

    async def guard(request: Request) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not given and request.url.path in ANTHROPIC_PATHS:
            given = request.headers.get("x-api-key", "")  # how Anthropic's clients send the key
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise APIError(401, f"missing or invalid {what} (send 'Authorization: Bearer <{what}>')",
                           type="authentication_error")  # fmt: skip

    return guard
