"""How an error is named on the two client APIs paged serves, written once for the engine and the router.

OpenAI's envelope is ``{"error": {message, type, param, code}}``; Anthropic's Messages API (``ANTHROPIC_PATHS``)
uses ``{"type": "error", "error": {type, message}}`` with its own type names, which its clients map to
exception classes. A router in front of an engine must answer in the envelope the engine would have used.
"""

from __future__ import annotations

ANTHROPIC_PATHS = ("/v1/messages",)


def anthropic_error_type(status: int, openai_type: str) -> str:
    """Anthropic's name for an error of this status (its envelope has a type and a message, no ``param``)."""
    by_status = {
        400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
        413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
    }  # fmt: skip
    return by_status.get(status, "api_error" if status >= 500 else openai_type)
