"""Tool calling without a model: each family's parser on real-shaped outputs, streaming hold-back, the plan's
rendering through family-style chat templates (and Gemma's, which has no tool format), and the constraints of
``tool_choice`` required / named."""

from __future__ import annotations

import json

import pytest
from paged_engine.sampling_params import SamplingParamsError
from paged_engine.tokenizer.chat_template import ChatTemplate, builtin_template
from paged_engine.tools import ToolCallStream, ToolPlan, parser_for_template
from paged_engine.tools.parsers import HermesParser, Llama3JsonParser, PythonicParser

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}

# Family-style templates: how Qwen 2.5 / Qwen 3 (Hermes tags) and Llama 3.1 (JSON, ipython role) render tools.
QWEN_STYLE = (
    "{%- if tools %}<|im_start|>system\nTools:\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    'Call one with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} "
    "| tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA_STYLE = (
    "{%- if tools %}<|start_header_id|>system<|end_header_id|>\nEnvironment: ipython\n"
    'Reply with {"name": function name, "parameters": arguments}.\n'
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{%- for m in messages %}<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n"
    "{% if m.tool_calls %}<|python_tag|>{% for c in m.tool_calls %}"
    "{{ {'name': c.function.name, 'parameters': c.function.arguments} | tojson }}{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n{% endif %}"
)
GEMMA = builtin_template("gemma3")
CALL_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "clear"}'},
]


def test_parser_is_chosen_by_the_template_family_and_can_be_overridden():
    assert isinstance(parser_for_template(QWEN_STYLE), HermesParser)
    assert isinstance(parser_for_template(LLAMA_STYLE), Llama3JsonParser)
    assert isinstance(parser_for_template(GEMMA), PythonicParser)
    assert isinstance(parser_for_template(GEMMA, "hermes"), HermesParser)
    with pytest.raises(ValueError, match="tool parser must be one of"):
        parser_for_template(GEMMA, "nope")


@pytest.mark.parametrize(
    ("parser", "text", "content", "calls"),
    [
        (HermesParser(), 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
         "Sure.", [("get_weather", {"city": "Paris"})]),
        (HermesParser(), '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
         '"arguments": {"x": 1}}</tool_call>', None, [("a", {}), ("b", {"x": 1})]),
        (HermesParser(), "<tool_call>{not json</tool_call>", "<tool_call>{not json</tool_call>", []),
        (Llama3JsonParser(), '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}', None,
         [("get_weather", {"city": "Oslo"})]),
        (Llama3JsonParser(), '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"y": [1]}}', None,
         [("a", {}), ("b", {"y": [1]})]),
        (Llama3JsonParser(), "The answer is 4.", "The answer is 4.", []),
        (PythonicParser(), '[get_weather(city="Rome"), get_time()]', None, [("get_weather", {"city": "Rome"}),
                                                                           ("get_time", {})]),
        (PythonicParser(), '```tool_code\n[get_weather(city="Rome")]\n```', None, [("get_weather", {"city": "Rome"})]),
        (PythonicParser(), "[1, 2]", "[1, 2]", []),
        (PythonicParser(), "[os.system('x')]", "[os.system('x')]", []),  # only plain names, literal arguments
        (PythonicParser(), "[f(x=open('y'))]", "[f(x=open('y'))]", []),
    ],
)  # fmt: skip
def test_family_parsers(parser, text, content, calls):
    got_content, got = parser.parse(text)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got] == calls
    assert all(c.id.startswith("call_") for c in got)


@pytest.mark.parametrize(
    ("parser", "deltas", "streamed", "rest", "calls"),
    [
        (HermesParser(), ["Let me ", "check. <tool", '_call>{"name": "get_time", "arguments": {}}', "</tool_call>"],
         "Let me check. ", "", ["get_time"]),
        (HermesParser(), ["a <to", "ast>"], "a <toast>", "", []),  # a marker prefix that was not one is sent late
        (PythonicParser(), [" [get_", 'weather(city="Oslo")]'], "", "", ["get_weather"]),
        (PythonicParser(), ["Hello", " there"], "Hello there", "", []),
        (PythonicParser(), ["[not a", " call"], "", "[not a call", []),  # held, then content after all
        (Llama3JsonParser(), ['{"name": "get_time", ', '"parameters": {}}'], "", "", ["get_time"]),
    ],
)  # fmt: skip
def test_streaming_holds_back_only_what_may_be_a_call(parser, deltas, streamed, rest, calls):
    stream = ToolCallStream(parser)
    assert "".join(stream.feed(d) for d in deltas) == streamed
    got_rest, got = stream.finish()
    assert got_rest == rest
    assert [c.name for c in got] == calls


def test_native_templates_get_the_tools_and_object_arguments():
    for template, marker in ((QWEN_STYLE, "<tool_call>"), (LLAMA_STYLE, "<|python_tag|>")):
        plan = ToolPlan.create([WEATHER], "auto", template)
        assert plan is not None and plan.native
        turns, variables = plan.render_inputs(CALL_TURNS)
        text = ChatTemplate(template).render(turns, **variables)
        assert '"name": "get_weather"' in text and "current weather of a city" in text
        assert marker in text and '"city": "Paris"' in text  # the earlier call, arguments as an object
        assert '"sky": "clear"' in text


def test_gemma_gets_the_tools_described_and_calls_as_plain_turns():
    plan = ToolPlan.create([WEATHER, TIME], "auto", GEMMA)
    assert plan is not None and not plan.native
    turns, variables = plan.render_inputs([{"role": "system", "content": "Be brief."}, *CALL_TURNS])
    assert variables == {}
    text = ChatTemplate(GEMMA, bos_token="<bos>").render(turns)  # Gemma's alternation rule holds
    assert text.startswith("<bos><start_of_turn>user\nBe brief.")
    assert '"name": "get_time"' in text and "Python list of calls" in text
    assert "<start_of_turn>model\n[get_weather(city='Paris')]<end_of_turn>" in text
    assert 'Result of c1: {"sky": "clear"}' in text


def test_required_and_named_choices_constrain_the_output():
    required = ToolPlan.create([WEATHER, TIME], "required", GEMMA)
    schema = required.constraint().json
    assert schema["type"] == "array" and schema["minItems"] == 1
    _, calls = required.parse('[{"name": "get_time", "parameters": {}}]')
    assert [c.name for c in calls] == ["get_time"]
    named = ToolPlan.create([WEATHER, TIME], {"type": "function", "function": {"name": "get_weather"}}, QWEN_STYLE)
    assert named.constraint().json == WEATHER["function"]["parameters"]
    content, calls = named.parse('{"city": "Lima"}')
    assert content is None and [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Lima"}')]
    single = ToolPlan.create([WEATHER, TIME], "required", GEMMA, parallel=False)
    assert single.constraint().json["maxItems"] == 1
    _, calls = single.parse('[{"name": "get_time", "parameters": {}}, {"name": "get_time", "parameters": {}}]')
    assert len(calls) == 1
    assert ToolPlan.create([WEATHER], "auto", QWEN_STYLE).constraint() is None
    assert ToolPlan.create([WEATHER], "none", QWEN_STYLE) is None


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        (None, "required", "tool_choice"),
        ([WEATHER], {"type": "function", "function": {"name": "missing"}}, "tool_choice"),
        ([WEATHER], "sometimes", "tool_choice"),
        ([WEATHER, WEATHER], "auto", "tools"),
    ],
)
def test_inconsistent_tools_are_refused_naming_the_field(tools, choice, param):
    with pytest.raises(SamplingParamsError) as caught:
        ToolPlan.create(tools, choice, QWEN_STYLE)
    assert caught.value.param == param
