"""Structured output end to end on a tiny random Gemma 3 with the real Gemma tokenizer: offline through ``LLM``
and through the server with the official ``openai`` client. A random model left alone emits garbage; every
constrained output must still parse and match its schema, regex or choice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from paged_engine import LLM, SamplingParams
from paged_engine.sampling_params import SamplingParamsError, StructuredOutputParams

from tests.sample.grammar_helpers import json_schemas, regexes, schema_validator, strict_json

pytestmark = [pytest.mark.server, pytest.mark.gemma]

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "sunny": {"type": "boolean"},
        "temperature": {"type": "integer", "minimum": -40, "maximum": 50},
        "tags": {"type": "array", "items": {"enum": ["warm", "cold"]}, "maxItems": 3},
    },
    "required": ["city", "sunny", "temperature", "tags"],
    "additionalProperties": False,
}
REGEX = r"[A-Z][a-z]{2,5}-[0-9]{3}"
CHOICES = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def llm(tiny_gemma_dir: Path) -> LLM:
    return LLM(str(tiny_gemma_dir), kv_cache_memory=64 << 20, max_model_len=1024, num_threads=1)


def check_json(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


def test_llm_outputs_match_their_constraints_in_one_mixed_batch(llm: LLM) -> None:
    specs = [
        StructuredOutputParams(json=SCHEMA),
        StructuredOutputParams(regex=REGEX),
        StructuredOutputParams(choice=CHOICES),
        None,  # an unconstrained request in the same batch
    ]
    params = [
        SamplingParams(temperature=1.0, seed=seed, max_tokens=80, structured_output=spec)
        for seed in range(3)
        for spec in specs
    ]
    outputs = llm.generate(["Weather report:"] * len(params), params)
    for p, output in zip(params, outputs, strict=True):
        completion = output.outputs[0]
        spec = p.structured_output
        if spec is None:
            continue
        assert completion.finish_reason == "stop", completion
        if spec.json is not None:
            check_json(completion.text)
        elif spec.regex is not None:
            assert re.fullmatch(REGEX, completion.text), completion.text
        else:
            assert completion.text in CHOICES


def test_llm_constraint_holds_for_every_parallel_sample_and_greedy(llm: LLM) -> None:
    spec = StructuredOutputParams(json=SCHEMA)
    (sampled,) = llm.generate(
        "Go:", SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=80, structured_output=spec)
    )
    (greedy,) = llm.generate("Go:", SamplingParams(temperature=0.0, max_tokens=80, structured_output=spec))
    for completion in [*sampled.outputs, *greedy.outputs]:
        check_json(completion.text)


def test_llm_constraint_survives_preemption(tiny_gemma_dir: Path) -> None:
    """Few KV blocks: requests are preempted and resumed by recompute, so each matcher is rebuilt from the
    output so far; the outputs must still match."""
    small = LLM(
        str(tiny_gemma_dir), num_kv_blocks=24, block_size=16, max_model_len=160,
        num_threads=1,
    )  # fmt: skip
    spec = StructuredOutputParams(json=SCHEMA)
    prompt = "word " * 40
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=80, structured_output=spec)
    outputs = small.generate([prompt] * 4, params)
    assert small.engine.core.num_preemptions > 0
    for output in outputs:
        check_json(output.outputs[0].text)


def test_llm_refuses_an_invalid_schema(llm: LLM) -> None:
    bad = SamplingParams(structured_output=StructuredOutputParams(json={"type": "no-such-type"}))
    with pytest.raises(SamplingParamsError, match="invalid json constraint"):
        llm.generate("x", bad)
    (ok,) = llm.generate("x", SamplingParams(max_tokens=2))  # the engine is unharmed
    assert len(ok.outputs[0].token_ids) == 2


# ---- the server, with the official client ----


def test_chat_response_format_json_schema(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny-gemma", messages=[{"role": "user", "content": "The weather?"}], max_tokens=80, n=3, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}},
    )  # fmt: skip
    for choice in chat.choices:
        assert choice.finish_reason == "stop"
        check_json(choice.message.content)


def test_chat_response_format_json_object(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny-gemma", messages=[{"role": "user", "content": "JSON please"}], max_tokens=24, temperature=0,
        response_format={"type": "json_object"},
    )  # fmt: skip
    text = chat.choices[0].message.content
    assert text.startswith("{")
    if chat.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_completions_guided_regex_and_choice(client: openai.OpenAI) -> None:
    regex = client.completions.create(
        model="tiny-gemma", prompt="Code:", max_tokens=20, n=2, seed=5, extra_body={"guided_regex": REGEX}
    )
    choice = client.completions.create(
        model="tiny-gemma", prompt="Colour:", max_tokens=20, seed=5, extra_body={"guided_choice": CHOICES}
    )
    for c in regex.choices:
        assert re.fullmatch(REGEX, c.text), c.text
    assert choice.choices[0].text in CHOICES


def test_streamed_chunks_join_into_valid_json(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny-gemma", messages=[{"role": "user", "content": "go"}], max_tokens=80, seed=2, stream=True,
        extra_body={"guided_json": SCHEMA},
    )  # fmt: skip
    check_json("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"guided_json": {"type": "no-such-type"}}, "guided_json"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_regex": "a" * 70000}, "guided_regex"),
        ({"guided_grammar": "root ::= missing"}, "guided_grammar"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 3}}}}, "response_format"),
    ],
)
def test_bad_constraints_are_400s_naming_the_field(client: openai.OpenAI, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny-gemma", messages=[{"role": "user", "content": "x"}], max_tokens=4, extra_body=extra
        )
    assert caught.value.body["param"] == param, caught.value.body


# ---- generated constraints on the tiny model: strict JSON that matches, or a cut that says so ----


def classify(completion, check) -> str:  # type: ignore[no-untyped-def]
    """ "valid" (finished and checked), or "cut" (max_tokens reached, said so): never invalid."""
    if completion.finish_reason == "length":
        return "cut"
    assert completion.finish_reason == "stop", completion
    check(completion.text)
    return "valid"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=json_schemas())
def test_generated_schemas_on_the_model_yield_strict_json_that_matches(llm: LLM, schema: dict) -> None:
    validator = schema_validator(schema)
    spec = StructuredOutputParams(json=schema)
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=120, structured_output=spec) for seed in range(3)]
    outputs = llm.generate(["Data:\n"] * 3, params)
    for output in outputs:
        classify(output.outputs[0], lambda text: validator.validate(strict_json(text)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex=regexes())
def test_generated_regexes_on_the_model_are_fully_matched(llm: LLM, regex: str) -> None:
    spec = StructuredOutputParams(regex=regex)
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=40, structured_output=spec) for seed in range(3)]
    for output in llm.generate(["Code:"] * 3, params):
        classify(output.outputs[0], lambda text: re.fullmatch(regex, text, re.DOTALL) or pytest.fail(text))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parameters=json_schemas())
def test_generated_tool_parameters_on_the_model_yield_strict_json_arguments(llm: LLM, parameters: dict) -> None:
    schema = {"type": "object", "properties": {"x": parameters}, "required": ["x"]}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    params = SamplingParams(temperature=1.0, seed=4, max_tokens=160)
    (output,) = llm.chat([{"role": "user", "content": "Call f."}], params, tools=tools, tool_choice="required")
    completion = output.outputs[0]
    if completion.finish_reason == "length":
        return  # cut: no calls parsed, said so
    assert completion.tool_calls, completion.text
    for call in completion.tool_calls:
        schema_validator(schema).validate(strict_json(call.arguments))


ISSUE_SCHEMA = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 2, "maxItems": 4},
        "scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 3,
                   "maxItems": 3},
    },
    "required": ["tags", "scores"],
    "additionalProperties": False,
}  # fmt: skip


def test_length_bounded_strings_through_the_server_are_strict_json(client: openai.OpenAI) -> None:
    """The reported case: guided_json and response_format with maxLength strings, temperature 1.0, seeds 0-2."""
    validator = schema_validator(ISSUE_SCHEMA)
    kinds = {"valid": 0, "cut": 0}
    for seed in range(3):
        completion = client.completions.create(
            model="tiny-gemma", prompt="Data:\n", temperature=1.0, seed=seed, max_tokens=200,
            extra_body={"guided_json": ISSUE_SCHEMA},
        )  # fmt: skip
        chat = client.chat.completions.create(
            model="tiny-gemma", messages=[{"role": "user", "content": "Data?"}], temperature=1.0, seed=seed,
            max_tokens=200,
            response_format={"type": "json_schema", "json_schema": {"name": "d", "schema": ISSUE_SCHEMA}},
        )  # fmt: skip
        for choice in [completion.choices[0], chat.choices[0]]:
            text = choice.text if hasattr(choice, "text") else choice.message.content
            kind = "cut" if choice.finish_reason == "length" else "valid"
            if kind == "valid":
                assert choice.finish_reason == "stop"
                validator.validate(strict_json(text))
            kinds[kind] += 1
    assert kinds["valid"] > 0, kinds


def test_a_string_with_a_pattern_and_a_length_is_a_400_naming_the_field(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 4}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-gemma", prompt="x", max_tokens=4, extra_body={"guided_json": schema})
    assert caught.value.body["param"] == "guided_json"
    assert "/properties/code" in caught.value.body["message"]
