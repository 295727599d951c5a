"""Server-sent events of an OpenAI-compatible streaming response, one ``data:`` line at a time.

Only ``data:`` lines carry payloads in these APIs; comments (``:``), ``event:``/``id:`` fields and blank
separators are skipped. ``[DONE]`` ends the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class StreamError(Exception):
    """The stream carried an error object or something that is not JSON."""


@dataclass(frozen=True)
class Event:
    """One parsed chunk: whether it carries choices (a token step: counts for TTFT and ITL even when its text
    is empty, e.g. a byte held back by the detokenizer), the text it adds, and the usage block if sent."""

    has_choices: bool
    text: str
    usage: dict[str, Any] | None
    done: bool = False


DONE = Event(False, "", None, done=True)


def parse_line(line: str) -> Event | None:
    """The event on one line of the body, or ``None`` for lines without a payload."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return DONE
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise StreamError(f"chunk is not JSON: {payload[:200]!r}") from exc
    if not isinstance(data, dict):
        raise StreamError(f"chunk is not a JSON object: {payload[:200]!r}")
    if "error" in data:
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise StreamError(f"server error in stream: {message}")
    text = []
    choices = data.get("choices") or []
    for choice in choices:
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if piece:
            text.append(piece)
    return Event(bool(choices), "".join(text), data.get("usage"))
