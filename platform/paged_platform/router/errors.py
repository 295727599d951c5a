"""Errors the router answers itself, in the envelope the engine would have used on that path: OpenAI's
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status, or on Anthropic's Messages API
``{"type": "error", "error": {"type", "message"}}`` (``paged_platform.error_envelopes``)."""

from __future__ import annotations

import json

from starlette.responses import Response

from paged_platform.error_envelopes import anthropic_error_type


class RouterError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str,
        reason: str,
        param: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        #: The ``reason`` label of ``paged_router_rejected_requests_total``.
        self.reason = reason
        self.param = param
        self.retry_after = retry_after

    def response(self, anthropic: bool = False) -> Response:
        return error_response(self.status, self.message, self.type, self.param, self.retry_after, anthropic)


def error_body(status: int, message: str, type: str, param: str | None = None, anthropic: bool = False) -> bytes:
    if anthropic:
        error = {"type": anthropic_error_type(status, type), "message": message}
        return json.dumps({"type": "error", "error": error}).encode()
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": status}}).encode()


def error_response(
    status: int,
    message: str,
    type: str,
    param: str | None = None,
    retry_after: int | None = None,
    anthropic: bool = False,
) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    body = error_body(status, message, type, param, anthropic)
    return Response(body, status, headers, media_type="application/json")


def bad_request(message: str, param: str | None = None) -> RouterError:
    return RouterError(400, message, type="invalid_request_error", reason="bad_request", param=param)
