"""The text a request is routed on, and its chained chunk hashes (pure).

The router has no tokenizer, so prefix affinity works on characters: the routing text is cut into fixed-size
chunks and each chunk's hash chains its parent's, ``h_i = hash((h_{i-1}, chunk_i))``, so ``h_i`` names the
whole prefix up to chunk ``i`` (as the engine's block hashes name a token prefix). Two requests that share a
textual prefix share the hashes of the chunks it covers completely; the engine, whose blocks hold tokens, hits
on roughly the same prefix. A trailing partial chunk is not hashed, as the engine never caches partial blocks.

Chat requests (OpenAI's chat and Anthropic's Messages API, whose system prompt is a top-level ``system`` field,
taken as a leading ``system`` message) are routed on all their messages, in order: the engine applies a chat
template, a deterministic function of the messages, so equal leading messages give an equal leading templated
prompt. The router joins
each message's role and text with separators that cannot occur in either (``\\x1e``/``\\x1f``), an
approximation of the template that preserves exactly this property without needing the model's template.

Hashes use Python's ``hash`` of a tuple: fast, and only ever compared inside one router process.
"""

from __future__ import annotations

from typing import Any

#: Separators between a message's role and content, and between messages (ASCII record/unit separators).
_UNIT, _RECORD = "\x1f", "\x1e"


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list (other parts ignored)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def routing_text(body: dict[str, Any]) -> str:
    """The prompt text of a completion (the first prompt of a list) or the joined messages of a chat request
    (after an Anthropic request's ``system`` prompt).

    Token-id prompts are routed on their ids' decimal text: equal leading ids give equal leading text.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        system = body.get("system")
        parts = [f"system{_UNIT}{_content_text(system)}{_RECORD}"] if system is not None else []
        for message in messages:
            if isinstance(message, dict):
                role = message.get("role") if isinstance(message.get("role"), str) else ""
                parts.append(f"{role}{_UNIT}{_content_text(message.get('content'))}{_RECORD}")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of prompts: routed on the first
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return ",".join(str(token) for token in prompt)
    return ""


def chunk_hashes(text: str, chunk_chars: int, max_chunks: int) -> tuple[int, ...]:
    """Chained hashes of the first ``max_chunks`` full ``chunk_chars``-character chunks of ``text``."""
    if chunk_chars < 1:
        raise ValueError(f"chunk size must be >= 1 character, got {chunk_chars}")
    hashes: list[int] = []
    parent = 0
    for start in range(0, min(len(text) // chunk_chars, max_chunks) * chunk_chars, chunk_chars):
        parent = hash((parent, text[start : start + chunk_chars]))
        hashes.append(parent)
    return tuple(hashes)
