"""Anthropic's Messages API (``POST /v1/messages``) tested with the official ``anthropic`` client against the real
server on the tiny random Gemma: replies, streaming events in Anthropic's order, tool use, and errors in
Anthropic's envelope."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pytest

from tests.server.conftest import API_KEY, ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.gemma]

WEATHER = {
    "name": "get_weather",
    "description": "current weather of a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def claude(server: ServerProcess):
    with anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


def test_a_reply_is_a_message(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="tiny-gemma", max_tokens=5, system="Be brief.", messages=ASK, extra_body={"temperature": 0}
    )
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == "tiny-gemma"
    assert [block.type for block in message.content] == ["text"]
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 1 <= message.usage.output_tokens <= 5
    if message.stop_reason == "max_tokens":
        assert message.usage.output_tokens == 5


def test_streamed_events_come_in_anthropic_order_and_match_the_reply(claude: anthropic.Anthropic) -> None:
    reply = claude.messages.create(model="tiny-gemma", max_tokens=12, messages=ASK, extra_body={"temperature": 0})
    with claude.messages.stream(
        model="tiny-gemma", max_tokens=12, messages=ASK, extra_body={"temperature": 0}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    core = [k for k in kinds if k not in ("text",)]  # the helper adds 'text' events beside the deltas
    assert core[0] == "message_start" and core[1] == "content_block_start"
    assert core[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(core[2:-3]) <= {"content_block_delta"}
    assert final.content[0].text == reply.content[0].text
    assert final.stop_reason == reply.stop_reason
    assert final.usage.output_tokens == reply.usage.output_tokens


def test_tool_use_with_tool_choice_any(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="tiny-gemma", max_tokens=60, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )  # fmt: skip
    assert message.stop_reason == "tool_use"
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, WEATHER["input_schema"])
    follow_up = claude.messages.create(
        model="tiny-gemma", max_tokens=4, tools=[WEATHER],
        messages=[*ASK, {"role": "assistant", "content": [use.model_dump()]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}],
    )  # fmt: skip
    assert follow_up.content and follow_up.content[0].type == "text"


def test_streamed_tool_use_arrives_as_input_json(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="tiny-gemma", max_tokens=60, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:  # fmt: skip
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in deltas
    assert final.stop_reason == "tool_use"
    (use,) = final.content
    assert use.type == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER["input_schema"])


def test_errors_use_anthropics_envelope(claude: anthropic.Anthropic, server: ServerProcess) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model="tiny-gemma", max_tokens=4, messages=ASK, extra_body={"temperature": 1.5})
    assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error"
    assert "temperature" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=4, messages=ASK)
    assert missing.value.body["error"]["type"] == "not_found_error"
    stranger = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with stranger, pytest.raises(anthropic.AuthenticationError) as denied:
        stranger.messages.create(model="tiny-gemma", max_tokens=4, messages=ASK)
    assert denied.value.body["error"]["type"] == "authentication_error"
    raw = httpx.post(f"{server.url}/v1/messages", headers={"x-api-key": API_KEY}, json={"model": "tiny-gemma"})
    assert raw.status_code == 400 and raw.json()["type"] == "error"
    assert json.dumps(raw.json()["error"]).count("messages") >= 1  # the missing field is named
