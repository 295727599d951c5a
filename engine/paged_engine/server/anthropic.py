"""Anthropic's Messages API (``POST /v1/messages``) over the same engine path as chat completions.

A Messages request is translated into a chat-completions request (system prompt, text / ``tool_use`` /
``tool_result`` blocks, tools and ``tool_choice``) and runs through :class:`Serving`'s validation, chat template,
tool plan and engine conversation; only the shapes differ. Replies are ``message`` objects with ``text`` and
``tool_use`` content blocks; streams are Anthropic's server-sent events (``message_start``,
``content_block_start`` / ``_delta`` / ``_stop``, ``message_delta``, ``message_stop``, ``error``). Errors use
Anthropic's envelope, ``{"type": "error", "error": {"type", "message"}}`` (``server/errors.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paged_engine.output_processor import ChoiceState
from paged_engine.server.engine_client import EngineDeadError
from paged_engine.server.errors import APIError, anthropic_error_type, bad_request
from paged_engine.server.protocol import ChatCompletionRequest
from paged_engine.server.serving import Serving
from paged_engine.tools import ToolCall, ToolPlan

PATH = "/v1/messages"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Block(BaseModel):
    """Content blocks ignore fields they don't use: clients echo whole response blocks (``caller``, ...) back."""

    model_config = ConfigDict(extra="ignore")


class TextBlock(_Block):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False
    cache_control: dict[str, Any] | None = None


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    input_schema: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class MessagesRequest(_Strict):
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = Field(None, max_length=64)
    stream: bool = False
    # sampling knobs of earlier API versions (the current client sends them through extra_body)
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1)
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    metadata: dict[str, Any] | None = None


def _text(content: str | list[TextBlock]) -> str:
    return content if isinstance(content, str) else "".join(block.text for block in content)


def chat_messages(body: MessagesRequest) -> list[dict[str, Any]]:
    """The conversation in chat-completions shape: tool uses become assistant tool calls, results tool turns."""
    messages: list[dict[str, Any]] = []
    if body.system:
        messages.append({"role": "system", "content": _text(body.system)})
    for message in body.messages:
        if isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content})
            continue
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [
            {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
            for b in message.content
            if isinstance(b, ToolUseBlock)
        ]
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        for result in results:
            content = _text(result.content)
            messages.append(
                {"role": "tool", "tool_call_id": result.tool_use_id, "content": f"error: {content}" if result.is_error
                 else content}
            )  # fmt: skip
        if text or calls or not results:
            messages.append({"role": message.role, "content": text, **({"tool_calls": calls} if calls else {})})
    return messages


def chat_request(body: MessagesRequest) -> ChatCompletionRequest:
    tools = tool_choice = None
    if body.tools:
        tools = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema}}
            for t in body.tools
        ]  # fmt: skip
    choice = body.tool_choice
    if choice is not None:
        if choice.type == "tool":
            if not choice.name:
                raise bad_request("tool_choice of type tool needs a name", "tool_choice")
            tool_choice = {"type": "function", "function": {"name": choice.name}}
        else:
            tool_choice = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    try:
        return ChatCompletionRequest.model_validate({
            "model": body.model, "messages": chat_messages(body), "max_tokens": body.max_tokens,
            "temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k, "stop": body.stop_sequences,
            "stream": body.stream, "tools": tools, "tool_choice": tool_choice,
            "parallel_tool_calls": not (choice is not None and choice.disable_parallel_tool_use),
        })  # fmt: skip
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else None
        raise bad_request(f"{'.'.join(map(str, first.get('loc', ())))}: {first['msg']}", field) from None


def _message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
            "input": json.loads(call.arguments)}  # fmt: skip


def _stop(choice: ChoiceState, called: bool) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) for a finished choice."""
    if called:
        return "tool_use", None
    if choice.finish_reason == "length":
        return "max_tokens", None
    if isinstance(choice.stop_reason, str):
        return "stop_sequence", choice.stop_reason
    return "end_turn", None


class MessagesServing:
    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    def prepare(self, body: MessagesRequest) -> tuple[ChatCompletionRequest, list[list[int]], list[Any]]:
        chat = chat_request(body)
        prompts, params = self.serving.prepare_chat(chat)
        return chat, prompts, params

    def _plan(self, chat: ChatCompletionRequest) -> ToolPlan | None:
        return self.serving.tool_plan(chat)

    async def message(self, body: MessagesRequest) -> dict[str, Any]:
        chat, prompts, params = self.prepare(body)
        choice: ChoiceState | None = None
        async for update in self.serving.run("messages", prompts, params, chat, _message_id()):
            choice = update.choice
        assert choice is not None
        plan = self._plan(chat)
        content, calls = plan.parse(choice.text) if plan is not None else (choice.text, [])
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content or not calls else []
        blocks.extend(_tool_use(call) for call in calls)
        stop_reason, stop_sequence = _stop(choice, bool(calls))
        return {
            "id": _message_id(), "type": "message", "role": "assistant",
            "model": self.serving.response_model(chat.model), "content": blocks, "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": {"input_tokens": len(prompts[0]), "output_tokens": len(choice.token_ids)},
        }  # fmt: skip

    async def stream(
        self, chat: ChatCompletionRequest, prompts: list[list[int]], params: list[Any]
    ) -> AsyncGenerator[str, None]:
        def event(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data}, ensure_ascii=False)}\n\n"

        plan = self._plan(chat)
        tools = plan.stream() if plan is not None else None
        message_id = _message_id()
        yield event("message_start", {"message": {
            "id": message_id, "type": "message", "role": "assistant",
            "model": self.serving.response_model(chat.model), "content": [], "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": len(prompts[0]), "output_tokens": 0},
        }})  # fmt: skip
        index = 0
        text_open = False

        def text_delta(text: str) -> list[str]:
            nonlocal text_open
            events = []
            if not text_open:
                events.append(
                    event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                )
                text_open = True
            if text:
                events.append(
                    event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": text}})
                )
            return events

        try:
            async for update in self.serving.run("messages", prompts, params, chat, message_id):
                choice = update.choice
                text = tools.feed(update.text) if tools is not None else update.text
                calls: list[ToolCall] = []
                if update.finished and tools is not None:
                    rest, calls = tools.finish()
                    text += rest
                if text:
                    for e in text_delta(text):
                        yield e
                if not update.finished:
                    continue
                if not text_open and not calls:
                    for e in text_delta(""):
                        yield e
                if text_open:
                    yield event("content_block_stop", {"index": index})
                    index += 1
                for call in calls:
                    block = _tool_use(call)
                    arguments = json.dumps(block["input"], ensure_ascii=False)
                    yield event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                    yield event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "input_json_delta", "partial_json": arguments}},
                    )
                    yield event("content_block_stop", {"index": index})
                    index += 1
                stop_reason, stop_sequence = _stop(choice, bool(calls))
                yield event("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                              "usage": {"output_tokens": len(choice.token_ids)}})  # fmt: skip
                yield event("message_stop", {})
        except EngineDeadError as exc:
            yield event("error", {"error": {"type": "overloaded_error", "message": str(exc)}})
        except APIError as exc:
            yield event(
                "error", {"error": {"type": anthropic_error_type(exc.status, exc.type), "message": exc.message}}
            )
