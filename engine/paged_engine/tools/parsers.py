"""Tool-call parsers: a model's raw output text -> (content, tool calls), one parser per chat-template family.

Pure Python. Each parser also says where in a growing output a call may begin (``hold_from``), so streaming
can send the text before it as content and hold back the rest until the output is complete.

* ``hermes`` (Qwen 2.5 / Qwen 3 and other Hermes-style templates): ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, anywhere in the output, any number of times.
* ``llama3_json`` (Llama 3.1+): the whole output is one or more ``{"name": ..., "parameters": {...}}`` objects
  (``;``-separated), optionally after ``<|python_tag|>``.
* ``pythonic`` (Gemma 3, and any template without tool support, where the tools are described in the prompt):
  the whole output is a Python list of calls with literal keyword arguments, ``[get_weather(city="Paris")]``.

Output that does not parse as calls is content, as it is: a model may always answer in prose.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it
    id: str = field(default_factory=_call_id)

    @classmethod
    def of(cls, name: Any, arguments: Any) -> ToolCall:
        if not isinstance(name, str) or not name:
            raise ValueError("a tool call needs a name")
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            raise ValueError("tool-call arguments must be an object")
        return cls(name, json.dumps(arguments, ensure_ascii=False))

    def openai(self, index: int | None = None) -> dict[str, Any]:
        call: dict[str, Any] = {
            "id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments},
        }  # fmt: skip
        return call if index is None else {"index": index, **call}


Parsed = tuple[str | None, list[ToolCall]]


class ToolParser(ABC):
    name: str = ""

    @abstractmethod
    def parse(self, text: str) -> Parsed:
        """The text outside tool calls (None when there is none) and the calls, in order."""

    @abstractmethod
    def hold_from(self, text: str) -> int:
        """The first index of ``text`` that may belong to a tool call (``len(text)``: none can)."""


def _partial_suffix(text: str, marker: str) -> int:
    """Where a suffix of ``text`` that is a proper prefix of ``marker`` starts (``len(text)`` if none)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return len(text) - k
    return len(text)


class HermesParser(ToolParser):
    name = "hermes"
    START, END = "<tool_call>", "</tool_call>"
    _CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> Parsed:
        if self.START not in text:
            return text, []
        calls = []
        try:
            for match in self._CALL.finditer(text):
                body = json.loads(match.group(1))
                calls.append(ToolCall.of(body.get("name"), body.get("arguments", body.get("parameters", {}))))
        except (ValueError, AttributeError):
            return text, []
        content = self._CALL.sub("", text).strip()
        return content or None, calls

    def hold_from(self, text: str) -> int:
        start = text.find(self.START)
        return start if start >= 0 else _partial_suffix(text, self.START)


def _starts_with(text: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the output so far (leading whitespace aside) is, or may become, one of ``prefixes``..."""
    stripped = text.lstrip()
    return not stripped or any(stripped.startswith(p) or p.startswith(stripped) for p in prefixes)


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    PYTHON_TAG = "<|python_tag|>"

    def parse(self, text: str) -> Parsed:
        body = text.strip().removeprefix(self.PYTHON_TAG).strip()
        if not body.startswith("{"):
            return text, []
        decoder, calls, i = json.JSONDecoder(), [], 0
        try:
            while i < len(body):
                obj, i = decoder.raw_decode(body, i)
                calls.append(ToolCall.of(obj.get("name"), obj.get("parameters", obj.get("arguments", {}))))
                while i < len(body) and body[i] in " \t\r\n;":
                    i += 1
        except (ValueError, AttributeError):
            return text, []
        return None, calls

    def hold_from(self, text: str) -> int:
        return 0 if _starts_with(text, ("{", self.PYTHON_TAG)) else len(text)


class PythonicParser(ToolParser):
    name = "pythonic"
    _FENCE = re.compile(r"^```(?:tool_code|python)?\s*(.*?)\s*```$", re.DOTALL)

    def parse(self, text: str) -> Parsed:
        body = text.strip()
        fenced = self._FENCE.match(body)
        if fenced:
            body = fenced.group(1)
        if not body.startswith("["):
            return text, []
        try:
            tree = ast.parse(body, mode="eval").body
            if not isinstance(tree, ast.List) or not tree.elts:
                return text, []
            calls = []
            for node in tree.elts:
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                    return text, []
                kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
                calls.append(ToolCall.of(node.func.id, kwargs))
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            return text, []
        return None, calls

    def hold_from(self, text: str) -> int:
        return 0 if _starts_with(text, ("[", "```")) else len(text)


PARSERS: dict[str, type[ToolParser]] = {p.name: p for p in (HermesParser, Llama3JsonParser, PythonicParser)}
TOOL_PARSER_CHOICES = ("auto", *PARSERS)


def parser_for_template(template_source: str | None, override: str = "auto") -> ToolParser:
    """``override`` if given, else the family the chat template's own tool format belongs to (``pythonic``, with
    the tools described in the prompt, when the template has none)."""
    if override != "auto":
        if override not in PARSERS:
            raise ValueError(f"tool parser must be one of {', '.join(TOOL_PARSER_CHOICES)}, got {override!r}")
        return PARSERS[override]()
    source = template_source or ""
    if HermesParser.START in source:
        return HermesParser()
    if Llama3JsonParser.PYTHON_TAG in source or "ipython" in source:
        return Llama3JsonParser()
    return PythonicParser()
