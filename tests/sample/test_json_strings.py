"""JSON-schema constraints produce JSON (RFC 8259) that matches the schema, with no model: the grammar's masks over
a byte-level vocabulary, and random logits sampled at temperature 1.0.

xgrammar 0.2.9 alone let raw control characters into length-bounded strings and wrote a pattern's quotes,
backslashes and control characters unescaped; ``json_strings`` rewrites those rules. These tests hold every kind
of string rule to the promise, at the mask and in sampled outputs."""

from __future__ import annotations

import re

import pytest
import torch
from grammar_helpers import (
    EOS,
    FORMATS,
    VOCAB,
    byte_token_ids,
    generate_rows,
    json_schemas,
    regexes,
    schema_validator,
    strict_json,
    text_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, StructuredOutput
from paged_engine.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputParams
from paged_engine.structured_output import grammar
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.tokenizer import FastTokenizer
from paged_engine.tools.chat import ToolPlan

CONTROL_CHARS = [chr(c) for c in range(0x20)]
# Where a string rule begins: (name, schema, text that leads into the string, escaped strings it must accept).
STRING_RULES = [
    ("plain", {"type": "string"}, '"a', ['"a\\n"', '"a\\u0006"']),
    ("maxLength", {"type": "string", "maxLength": 6}, '"a', ['"a\\n"', '"a\\u0006"', '"\\"\\\\\\t"']),
    ("minLength", {"type": "string", "minLength": 2}, '"', ['"\\n\\u001f"']),
    ("pattern .", {"type": "string", "pattern": "^a.*$"}, '"a', ['"a\\u0006\\t"']),
    ("pattern [^x]", {"type": "string", "pattern": "^[^x]*$"}, '"', ['"\\n\\u0006\\"\\\\"']),
    ("pattern literal", {"type": "string", "pattern": '^\\t"\\\\$'}, '"', ['"\\t\\"\\\\"', '"\\u0009\\u0022\\u005c"']),
    ("pattern class", {"type": "string", "pattern": "^[\\x00-\\x20]+$"}, '"', ['"\\u0001 \\n"']),
    ("enum", {"enum": ["a\x01b", "c"]}, '"a', ['"a\\u0001b"']),
    ("const", {"const": "\n"}, '"', ['"\\n"']),
    ("property name", {"type": "object", "additionalProperties": {"type": "integer"}}, '{"a', ['{"a\\n": 1}']),
    (
        "bounded property name",
        {"type": "object", "propertyNames": {"maxLength": 3}, "additionalProperties": {"type": "integer"}},
        '{"a',
        ['{"a\\n": 1}', '{"\\u0006": 2}'],
    ),
    (
        "patternProperties",
        {"type": "object", "patternProperties": {"^a.*$": {"type": "integer"}}, "additionalProperties": False},
        '{"a',
        ['{"a\\u0006": 1}'],
    ),
    (
        "propertyNames pattern",
        {"type": "object", "propertyNames": {"pattern": "^[^x]+$"}, "additionalProperties": {"type": "integer"}},
        '{"',
        ['{"\\n": 1}'],
    ),
    (
        "fixed property name",
        {"type": "object", "properties": {"a\x01": {"type": "integer"}}, "required": ["a\x01"]},
        '{"a',
        ['{"a\\u0001": 1}'],
    ),
    ("free value", {"type": "object"}, '{"k": "v', ['{"k": "v\\n"}']),
    ("free key", {"type": "object"}, '{"k', ['{"k\\t": 1}']),
    *[(f"format {name}", {"type": "string", "format": name}, '"', []) for name in FORMATS],
]


def allowed_after(compiler: GrammarCompiler, tokenizer: FastTokenizer, schema: dict, prefix: str) -> set[str]:
    """The texts of the tokens the schema's mask allows after ``prefix``."""
    row = SamplingRow.create(
        SamplingParams(temperature=0.0, structured_output=StructuredOutputParams(json=schema)), [1]
    )
    row.output_token_ids.extend(tokenizer.encode(prefix, add_special_tokens=False))
    metadata = SamplingMetadata.build([row], VOCAB, [EOS], structured_output=StructuredOutput(compiler))
    logits = torch.zeros(1, VOCAB)
    Sampler()(logits, metadata)
    return {tokenizer.decode([t]) for t in torch.isfinite(logits[0]).nonzero().flatten().tolist() if t != EOS}


def raw_controls(text: str) -> str:
    """``text`` with its escaped control characters written raw (what JSON forbids)."""
    text = text.replace("\\n", "\n").replace("\\t", "\t")
    return re.sub(r"\\u00([01][0-9a-f])", lambda m: chr(int(m.group(1), 16)), text)


def accepts(compiler: GrammarCompiler, tokenizer: FastTokenizer, schema: dict, text: str) -> bool:
    matcher = compiler.matcher(StructuredOutputParams(json=schema))
    tokens = tokenizer.encode(text, add_special_tokens=False)
    return all(matcher.accept_token(t) for t in tokens) and matcher.accept_token(EOS) and matcher.is_terminated()


@pytest.mark.parametrize(("name", "schema", "prefix", "escaped"), STRING_RULES, ids=[r[0] for r in STRING_RULES])
def test_every_string_rule_refuses_raw_control_characters_and_takes_their_escapes(
    compiler, tokenizer, name, schema, prefix, escaped
):
    allowed = allowed_after(compiler, tokenizer, schema, prefix)
    assert allowed, f"{name}: nothing may follow {prefix!r}"
    assert not allowed & set(CONTROL_CHARS), f"{name}: raw {sorted(allowed & set(CONTROL_CHARS))} allowed"
    for text in escaped:
        strict_json(text)
        assert accepts(compiler, tokenizer, schema, text), f"{name}: refuses {text!r}"
        raw = raw_controls(text)
        if raw != text:
            assert not accepts(compiler, tokenizer, schema, raw), f"{name}: accepts raw {raw!r}"


@pytest.mark.parametrize(
    "schema",
    [{"type": "string"}, {"type": "string", "maxLength": 5}, {"type": "string", "pattern": "^.*$"}],
    ids=["plain", "maxLength", "pattern"],
)
def test_no_string_rule_admits_an_encoded_surrogate(compiler, tokenizer, schema):
    """U+D86F encoded as UTF-8 bytes is no character: a model's byte tokens could spell it, the grammar must not."""
    matcher = compiler.matcher(StructuredOutputParams(json=schema))
    tokens = byte_token_ids(tokenizer, b'"\xed\xa1\xaf"')
    assert not all(matcher.accept_token(t) for t in tokens)
    valid = compiler.matcher(StructuredOutputParams(json=schema))
    assert all(valid.accept_token(t) for t in byte_token_ids(tokenizer, '"\ud7ff\ue000é"'.encode()))


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "object", "properties": {"éa": {"type": "integer"}}, "required": ["éa"]}, '{"éa": 1}'),
        ({"enum": ["éa", "b"]}, '"éa"'),
        ({"type": "string", "pattern": "^éa$"}, '"éa"'),
        ({"type": "string", "pattern": "^[\\x08\\x0c]+$"}, '"\\b\\f"'),
    ],
    ids=["property name", "enum", "pattern", "short escapes"],
)
def test_a_character_beside_hex_digit_letters_is_kept_exactly(compiler, tokenizer, schema, text):
    """xgrammar reads ``\\xe9a`` as U+0E9A: "éa" must stay "éa" (and ``\\b`` not become U+05CB)."""
    assert accepts(compiler, tokenizer, schema, text)
    assert not accepts(compiler, tokenizer, schema, text.replace("éa", "\u0e9a").replace("\\b", "\u05cb"))


def test_the_issue_example_is_valid_json_for_every_seed(compiler, tokenizer):
    """The reported case: strings bounded by maxLength inside an array, at temperature 1.0."""
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 2, "maxItems": 4},
            "scores": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 9},
                "minItems": 3,
                "maxItems": 3,
            },
        },
        "required": ["tags", "scores"],
        "additionalProperties": False,
    }
    validator = schema_validator(schema)
    for seed in range(3):
        rows = generate_rows(compiler, [StructuredOutputParams(json=schema)] * 4, steps=200, seed=seed)
        for row in rows:
            assert row.output_token_ids[-1] == EOS
            validator.validate(strict_json(text_of(tokenizer, row)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=json_schemas(), seed=st.integers(0, 2**16))
def test_generated_schemas_yield_strict_json_that_matches(compiler, tokenizer, schema, seed):
    """Any generated schema, three samples: each that ends is strict JSON matching the schema; one cut off by the
    step budget is a prefix the grammar accepts (counted apart, never taken for invalid output)."""
    rows = generate_rows(compiler, [StructuredOutputParams(json=schema)] * 3, steps=160, seed=seed)
    validator = schema_validator(schema)
    for row in rows:
        text = text_of(tokenizer, row)
        if row.output_token_ids[-1] == EOS:
            validator.validate(strict_json(text))
        else:  # cut: the replay into a fresh matcher must accept every token
            matcher = compiler.matcher(StructuredOutputParams(json=schema))
            assert all(matcher.accept_token(t) for t in row.output_token_ids)


@settings(max_examples=100, deadline=None)
@given(regex=regexes(), seed=st.integers(0, 2**16))
def test_generated_regexes_are_fully_matched(compiler, tokenizer, regex, seed):
    rows = generate_rows(compiler, [StructuredOutputParams(regex=regex)] * 3, steps=40, seed=seed)
    for row in rows:
        if row.output_token_ids[-1] == EOS:
            text = text_of(tokenizer, row)
            assert re.fullmatch(regex, text, re.DOTALL), (regex, text)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parameters=st.lists(json_schemas(), min_size=1, max_size=2), seed=st.integers(0, 2**16))
def test_generated_tool_parameters_yield_arguments_that_are_strict_json(compiler, tokenizer, parameters, seed):
    """``tool_choice: required`` over tools with generated parameter schemas: every finished reply parses into
    calls whose arguments are strict JSON matching that tool's parameters."""
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object", "properties": {"x": p}}}}
        for i, p in enumerate(parameters)
    ]
    plan = ToolPlan.create(tools, "required", None)
    assert plan is not None
    spec = plan.constraint()
    rows = generate_rows(compiler, [spec] * 3, steps=200, seed=seed)
    by_name = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    for row in rows:
        if row.output_token_ids[-1] != EOS:
            continue
        text = text_of(tokenizer, row)
        strict_json(text)
        content, calls = plan.parse(text)
        assert content is None and calls, text
        for call in calls:
            schema_validator(by_name[call.name]).validate(strict_json(call.arguments))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^a+$", "maxLength": 3},
        {"type": "object", "properties": {"d": {"type": "string", "format": "date", "minLength": 1}}},
        {"type": "object", "propertyNames": {"pattern": "^a+$", "maxLength": 2}},
        {"type": "string", "pattern": "^2", "format": "date"},
    ],
)
def test_a_string_with_two_of_pattern_format_and_length_is_refused_naming_where(schema):
    """xgrammar would enforce one of them and drop the others: refused rather than broken."""
    with pytest.raises(SamplingParamsError, match="cannot be combined") as refused:
        grammar.check(StructuredOutputParams(json=schema))
    assert refused.value.param == "structured_output.json"
    assert "at /" in str(refused.value)


def test_keywords_as_data_or_property_names_are_left_alone(compiler, tokenizer):
    """``const``/``enum``/``default`` hold instances, ``properties`` names: a "pattern" there is not a regex."""
    schema = {"const": {"pattern": "x"}, "default": {"pattern": "y"}}
    assert accepts(compiler, tokenizer, schema, '{"pattern":"x"}')  # xgrammar writes a const compact
    named = {"type": "object", "properties": {"format": {"type": "integer"}, "pattern": {"type": "integer"}}}
    assert accepts(compiler, tokenizer, {**named, "required": ["format"]}, '{"format": 1}')
