"""Errors the router answers itself, in the OpenAI envelope the engine uses:
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status."""

from __future__ import annotations

import json

from starlette.responses import Response


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

    def response(self) -> Response:
        return error_response(self.status, self.message, self.type, self.param, self.retry_after)


def error_body(status: int, message: str, type: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": status}}).encode()


def error_response(
    status: int, message: str, type: str, param: str | None = None, retry_after: int | None = None
) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(error_body(status, message, type, param), status, headers, media_type="application/json")


def bad_request(message: str, param: str | None = None) -> RouterError:
    return RouterError(400, message, type="invalid_request_error", reason="bad_request", param=param)
