"""Tool calling for one chat request: render the tools through the chat template, constrain or parse the output.

Pure Python; shared by the server's chat completions and ``LLM.chat``.

* A template that renders ``tools`` itself (Qwen's, Llama's) gets them as the ``tools`` variable, OpenAI-shaped;
  one that does not (Gemma's) gets them described in a system message, with calls asked for as a Python list
  (the ``pythonic`` format), and earlier calls and results rewritten as plain turns it can render.
* ``tool_choice="auto"``: the family's parser reads the output; prose stays content.
* ``"required"`` or a named function: the output is constrained (structured output) to a JSON list of calls or to
  the function's arguments, so a call comes back whatever the model; it is parsed from that JSON.
* ``"none"``: the tools are left out of the prompt and nothing is parsed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paged_engine.sampling_params import SamplingParamsError, StructuredOutputParams
from paged_engine.tools.parsers import Parsed, PythonicParser, ToolCall, ToolParser, parser_for_template

ToolChoice = str | Mapping[str, Any]


class _RequiredParser(ToolParser):
    """The constrained output of ``tool_choice="required"``: ``[{"name": ..., "parameters": {...}}, ...]``."""

    name = "required"

    def parse(self, text: str) -> Parsed:
        try:
            return None, [ToolCall.of(c.get("name"), c.get("parameters", {})) for c in json.loads(text)]
        except (ValueError, AttributeError, TypeError):
            return text, []  # cut short by max_tokens

    def hold_from(self, text: str) -> int:
        return 0


class _NamedParser(_RequiredParser):
    """The constrained output of a named ``tool_choice``: that function's arguments object."""

    def __init__(self, function: str) -> None:
        self.function = function

    def parse(self, text: str) -> Parsed:
        try:
            return None, [ToolCall.of(self.function, json.loads(text))]
        except (ValueError, TypeError):
            return text, []


class ToolCallStream:
    """Streams content while the output cannot be a tool call yet; holds the rest and parses it at the end."""

    def __init__(self, parser: ToolParser, parallel: bool = True) -> None:
        self.parser = parser
        self.parallel = parallel  # False: only the first call is kept
        self.text = ""
        self.sent = 0

    def feed(self, delta: str) -> str:
        """Adds ``delta``; returns the content that is now safe to send."""
        self.text += delta
        upto = max(self.sent, self.parser.hold_from(self.text))
        out, self.sent = self.text[self.sent : upto], upto
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The held text's remaining content and the tool calls it held."""
        held = self.text[self.sent :]
        content, calls = self.parser.parse(held)
        return (content or "", calls if self.parallel else calls[:1]) if calls else (held, [])


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    return tool.get("function") or {}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return content or ""


def _arguments(arguments: Any) -> dict[str, Any]:
    """An earlier call's arguments as an object (OpenAI sends a JSON string)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise SamplingParamsError(
                "messages", f"messages: tool-call arguments are not JSON: {arguments!r}"
            ) from None
    if not isinstance(arguments, dict):
        raise SamplingParamsError("messages", f"messages: tool-call arguments must be a JSON object, got {arguments!r}")
    return arguments


def _pythonic_call(call: Mapping[str, Any]) -> str:
    function = call.get("function") or {}
    args = ", ".join(f"{k}={v!r}" for k, v in _arguments(function.get("arguments")).items())
    return f"{function.get('name', '')}({args})"


def describe_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system text that tells a model without a tool format about the tools (the ``pythonic`` format)."""
    lines = [json.dumps(_function(tool), ensure_ascii=False) for tool in tools]
    return (
        "You can call these functions (JSON schemas of their parameters):\n" + "\n".join(lines) + "\n\n"
        "To call functions, reply with nothing but a Python list of calls with keyword arguments, for example "
        '[get_weather(city="Paris"), get_time(zone="CET")]. Otherwise, answer normally.'
    )


@dataclass
class ToolPlan:
    tools: list[dict[str, Any]]
    choice: ToolChoice
    parser: ToolParser
    native: bool  # the chat template renders ``tools`` itself
    parallel: bool = True  # parallel_tool_calls: more than one call per reply

    @classmethod
    def create(
        cls,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: ToolChoice | None,
        template_source: str | None,
        parser: str = "auto",
        parallel: bool = True,
    ) -> ToolPlan | None:
        """None when the request has no tools or ``tool_choice`` is ``none``; ``SamplingParamsError`` (naming
        ``tools`` or ``tool_choice``) when they do not fit together."""
        if not tools:
            if tool_choice not in (None, "none"):
                raise SamplingParamsError("tool_choice", "tool_choice needs tools")
            return None
        names = [_function(t).get("name") for t in tools]
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
            raise SamplingParamsError("tools", "every function in tools needs a unique, non-empty name")
        choice = "auto" if tool_choice is None else tool_choice
        if choice == "none":
            return None
        if isinstance(choice, Mapping):
            name = (choice.get("function") or {}).get("name")
            if name not in names:
                raise SamplingParamsError("tool_choice", f"tool_choice names {name!r}, which is not among the tools")
        elif choice not in ("auto", "required"):
            raise SamplingParamsError(
                "tool_choice", f"tool_choice must be none, auto, required or a function, got {choice!r}"
            )
        source = template_source or ""
        chosen = parser_for_template(source, parser)
        native = "tools" in source and not isinstance(chosen, PythonicParser)
        return cls([dict(t) for t in tools], choice, chosen, native, parallel)

    # ---- the prompt ----

    def render_inputs(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The messages and extra template variables to render."""
        if self.native:
            return [_with_object_arguments(m) for m in messages], {"tools": self.tools}
        return _plain_turns(messages, describe_tools(self.tools)), {}

    # ---- the output ----

    def constraint(self) -> StructuredOutputParams | None:
        if isinstance(self.choice, Mapping):
            name = self.choice["function"]["name"]
            function = next(_function(t) for t in self.tools if _function(t).get("name") == name)
            return StructuredOutputParams(json=function.get("parameters") or {"type": "object"})
        if self.choice == "required":
            options = [
                {
                    "type": "object",
                    "properties": {"name": {"const": _function(t)["name"]},
                                   "parameters": _function(t).get("parameters") or {"type": "object"}},
                    "required": ["name", "parameters"],
                }
                for t in self.tools
            ]  # fmt: skip
            schema = {"type": "array", "minItems": 1, "items": {"anyOf": options}}
            return StructuredOutputParams(json=schema if self.parallel else {**schema, "maxItems": 1})
        return None

    def output_parser(self) -> ToolParser:
        if isinstance(self.choice, Mapping):
            return _NamedParser(self.choice["function"]["name"])
        return _RequiredParser() if self.choice == "required" else self.parser

    def parse(self, text: str) -> Parsed:
        content, calls = self.output_parser().parse(text)
        return content, calls if self.parallel else calls[:1]

    def stream(self) -> ToolCallStream:
        return ToolCallStream(self.output_parser(), self.parallel)


def _with_object_arguments(message: Mapping[str, Any]) -> dict[str, Any]:
    """Templates index a call's arguments as an object (``arguments | tojson``); OpenAI sends a JSON string."""
    result = dict(message)
    calls = message.get("tool_calls")
    if calls:
        converted = []
        for call in calls:
            function = dict(call.get("function") or {})
            function["arguments"] = _arguments(function.get("arguments"))
            converted.append({**call, "function": function})
        result["tool_calls"] = converted
    return result


def _plain_turns(messages: Sequence[Mapping[str, Any]], system: str) -> list[dict[str, Any]]:
    """For a template without tools: the tool description joins the system message, an assistant's calls become
    its text (pythonic), tool results become user turns, and consecutive turns of one role are merged."""
    turns: list[dict[str, Any]] = []

    def add(role: str, content: str) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})

    rest = list(messages)
    if rest and rest[0].get("role") in ("system", "developer"):
        system = f"{_text(rest.pop(0).get('content'))}\n\n{system}".strip()
    add("system", system)
    for message in rest:
        role, content = message.get("role"), _text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = "[" + ", ".join(_pythonic_call(c) for c in message["tool_calls"]) + "]"
            add("assistant", f"{content}\n{calls}".strip())
        elif role == "tool":
            add("user", f"Result of {message.get('name') or message.get('tool_call_id') or 'the call'}: {content}")
        else:
            add("user" if role in ("user", "developer", "system") else str(role), content)
    return turns
