"""Tool calling through the server with the official ``openai`` client, and through ``LLM.chat``, on the tiny
random Gemma (real Gemma tokenizer and chat template: tools described in the prompt, ``pythonic`` calls).
``tool_choice`` required / named constrain the output, so even a random model returns well-formed calls."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest
from paged_engine import LLM, SamplingParams
from paged_engine.cli import build_parser

pytestmark = [pytest.mark.server, pytest.mark.gemma]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo"]}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
                       "additionalProperties": False},
    },
}  # fmt: skip
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls) -> None:  # type: ignore[no-untyped-def]
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_required_tool_choice_returns_calls(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny-gemma", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120, n=2, seed=3,
        parallel_tool_calls=False,
    )  # fmt: skip
    for choice in chat.choices:
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        check_calls(choice.message.tool_calls)


def test_named_tool_choice_calls_that_function(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny-gemma", messages=ASK, tools=TOOLS, max_tokens=60, seed=1,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )  # fmt: skip
    (call,) = chat.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    check_calls([call])


def test_streamed_tool_calls_arrive_in_openai_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny-gemma", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120, seed=4, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and calls
    for call in calls.values():
        assert call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_auto_leaves_prose_as_content_and_renders_tool_turns(client: openai.OpenAI) -> None:
    """A conversation with an earlier call and its result renders through Gemma's template (which allows only
    alternating user/model turns); the random model answers in prose, which stays content."""
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear", "temperature": 21}'},
    ]  # fmt: skip
    chat = client.chat.completions.create(model="tiny-gemma", messages=messages, tools=TOOLS, max_tokens=8, seed=0)
    choice = chat.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ],
)
def test_bad_tools_are_400s_naming_the_field(client: openai.OpenAI, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-gemma", messages=ASK, max_tokens=4, **extra)
    assert caught.value.body["param"] == param, caught.value.body


@pytest.mark.parametrize(
    "call",
    [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{not json"}},
        {"type": "function", "function": {"name": "get_weather", "arguments": "[1, 2]"}},
        {"type": "function", "function": "get_weather"},
    ],
)
def test_malformed_earlier_calls_are_400s(client: openai.OpenAI, call: dict) -> None:
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [{"id": "c", **call}]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-gemma", messages=messages, tools=TOOLS, max_tokens=4)
    assert caught.value.body["param"] == "messages", caught.value.body


def test_the_server_flag_names_a_parser() -> None:
    args = build_parser().parse_args(["serve", "default", "--tool-call-parser", "hermes"])
    assert args.tool_call_parser == "hermes"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "default", "--tool-call-parser", "nope"])


def test_llm_chat_with_tools(tiny_gemma_dir: Path) -> None:
    llm = LLM(str(tiny_gemma_dir), kv_cache_memory=32 << 20, max_model_len=512,
              num_threads=1)  # fmt: skip
    params = SamplingParams(temperature=1.0, seed=2, max_tokens=120)
    (required,) = llm.chat(ASK, params, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    completion = required.outputs[0]
    assert completion.content is None and len(completion.tool_calls) == 1
    for call in completion.tool_calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    # the parser override: hermes reads <tool_call> tags, which the constrained JSON never has
    (auto,) = llm.chat(ASK, SamplingParams(temperature=0.0, max_tokens=8), tools=TOOLS, tool_parser="hermes")
    assert auto.outputs[0].tool_calls == [] and auto.outputs[0].content == auto.outputs[0].text
    (plain,) = llm.chat(ASK, SamplingParams(temperature=0.0, max_tokens=4))
    assert plain.outputs[0].tool_calls is None
