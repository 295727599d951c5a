"""Error envelopes: every client mistake becomes a 4xx with OpenAI's ``{"error": {message, type, param, code}}``, or
on Anthropic's Messages API (``/v1/messages``) with Anthropic's ``{"type": "error", "error": {type, message}}``."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from paged_platform.error_envelopes import ANTHROPIC_PATHS, anthropic_error_type
from starlette.exceptions import HTTPException as StarletteHTTPException

from paged_engine.server.protocol import ErrorBody, ErrorResponse

__all__ = ["ANTHROPIC_PATHS", "APIError", "anthropic_error_type", "bad_request", "error_response"]


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.headers = headers


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def error_response(
    status: int,
    message: str,
    type: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    request: Request | None = None,
) -> JSONResponse:
    if request is not None and request.url.path in ANTHROPIC_PATHS:
        error = {"type": anthropic_error_type(status, type), "message": message}
        return JSONResponse({"type": "error", "error": error}, status_code=status, headers=headers)
    body = ErrorResponse(error=ErrorBody(message=message, type=type, param=param, code=status))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


# How pydantic names the member of a union it tried (``constrained-str``, ``list[int]``, ``function-after[...]``)
# in an error's location: not part of the field's path.
_UNION_TAGS = {"str", "int", "float", "bool", "none", "dict", "list", "constrained-str", "[key]"}


_SOURCES = {"body", "query", "path", "header", "cookie"}


def _is_union_tag(part: str) -> bool:
    return part in _UNION_TAGS or "[" in part or part.startswith(("function-", "constrained-"))


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """The first error, as OpenAI reports one: ``param`` is the top-level request field, the message gives the
    path inside it."""
    first = exc.errors()[0]
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON: {first.get('ctx', {}).get('error', message)}", None
    loc = list(map(str, first.get("loc", ())))
    if loc and loc[0] in _SOURCES:  # where the field was sent is not part of its name
        loc = loc[1:]
    loc = [part for part in loc if not _is_union_tag(part)] or loc
    if not loc:
        return message, None
    path = ".".join(loc)
    if first.get("type") == "extra_forbidden":
        return f"unrecognized request argument supplied: {path}", loc[0]
    return f"{path}: {message}", loc[0]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.headers, request)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, "invalid_request_error", param, request=request)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(exc.status_code, str(exc.detail), kind, headers=getattr(exc, "headers", None),
                              request=request)  # fmt: skip
