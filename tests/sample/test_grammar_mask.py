"""Structured output in the sampler: a byte-level vocabulary (one token per byte, plus EOS), random logits, and
xgrammar's masks. Every sampled sequence must match its constraint; unconstrained rows must be untouched."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch
from grammar_helpers import EOS, VOCAB, generate
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, StructuredOutput
from paged_engine.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputParams
from paged_engine.structured_output import grammar

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"enum": ["ada", "bob"]},
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "ok", "n"],
    "additionalProperties": False,
}


def test_each_kind_of_constraint_holds_in_one_batch(compiler, tokenizer):
    specs = [
        StructuredOutputParams(json=SCHEMA),
        StructuredOutputParams(json=json.dumps(SCHEMA)),
        StructuredOutputParams(regex=r"[a-z]{3}-[0-9]{2}"),
        StructuredOutputParams(choice=["yes", "no", 'say "maybe"']),
        StructuredOutputParams(grammar='root ::= "(" [0-9]+ ("+" [0-9]+)* ")"'),
    ] * 4
    texts = generate(compiler, tokenizer, specs)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for spec, text in zip(specs, texts, strict=True):
        if spec.json is not None:
            assert validator.is_valid(json.loads(text)), text
        elif spec.regex is not None:
            assert re.fullmatch(spec.regex, text), text
        elif spec.choice is not None:
            assert text in spec.choice
        else:
            assert re.fullmatch(r"\([0-9]+(\+[0-9]+)*\)", text), text


def test_json_object_is_an_object(compiler, tokenizer):
    # random logits over free JSON may not close within the budget; the prefix must still be an object
    (text,) = generate(compiler, tokenizer, [StructuredOutputParams(json_object=True)], steps=40)
    assert text.startswith("{")


def test_unconstrained_rows_are_untouched(compiler, tokenizer):
    rows = [
        SamplingRow.create(SamplingParams(temperature=0.0), [1]),
        SamplingRow.create(SamplingParams(temperature=0.0, structured_output=StructuredOutputParams(regex="z+")), [1]),
    ]
    metadata = SamplingMetadata.build(rows, VOCAB, [EOS], structured_output=StructuredOutput(compiler))
    assert metadata.grammar is not None and metadata.grammar.rows == [1]
    logits = torch.randn(2, VOCAB)
    before = logits.clone()
    Sampler()(logits, metadata)
    assert torch.equal(logits[0], before[0])
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert [tokenizer.decode([t]) for t in allowed] == ["z"]


def test_a_batch_without_constraints_builds_no_mask(compiler):
    structured = StructuredOutput(compiler)
    rows = [SamplingRow.create(SamplingParams(temperature=0.0), [1]) for _ in range(3)]
    metadata = SamplingMetadata.build(rows, VOCAB, [EOS], structured_output=structured)
    assert metadata.grammar is None and not metadata.modifies_logits


def test_a_resumed_row_replays_its_output(compiler, tokenizer):
    """After preemption the runner builds a new row holding the output so far: its matcher must catch up."""
    spec = StructuredOutputParams(choice=["abc", "abd"])
    row = SamplingRow.create(SamplingParams(temperature=0.0, structured_output=spec), [1])
    row.output_token_ids.extend(tokenizer.encode("ab", add_special_tokens=False))
    metadata = SamplingMetadata.build([row], VOCAB, [EOS], structured_output=StructuredOutput(compiler))
    logits = torch.zeros(1, VOCAB)
    Sampler()(logits, metadata)
    allowed = sorted(tokenizer.decode([t]) for t in torch.isfinite(logits[0]).nonzero().flatten().tolist())
    assert allowed == ["c", "d"]


def test_a_finished_grammar_allows_only_the_stop_token(compiler, tokenizer):
    row = SamplingRow.create(
        SamplingParams(temperature=0.0, structured_output=StructuredOutputParams(choice=["ok"])), [1]
    )
    row.output_token_ids.extend(tokenizer.encode("ok", add_special_tokens=False))
    metadata = SamplingMetadata.build([row], VOCAB, [EOS], structured_output=StructuredOutput(compiler))
    logits = torch.zeros(1, VOCAB)
    assert Sampler()(logits, metadata).sampled_token_ids.tolist() == [EOS]


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        (dict(json={"type": "nonsense"}), "structured_output.json"),
        (dict(regex="(ab"), "structured_output.regex"),
        (dict(grammar="root ::= undefined_rule"), "structured_output.grammar"),
    ],
)
def test_invalid_constraints_name_their_field(compiler, spec, param):
    params = StructuredOutputParams(**spec)
    with pytest.raises(SamplingParamsError) as checked:
        grammar.check(params)
    assert checked.value.param == param
    assert "/project/" not in str(checked.value)  # no C++ source locations for the client
    with pytest.raises(SamplingParamsError) as compiled:
        compiler.compile(params)
    assert compiled.value.param == param


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (dict(), "exactly one"),
        (dict(regex="a", choice=["a"]), "exactly one"),
        (dict(json="{not json"), "not valid JSON"),
        (dict(json="[1]"), "object or a boolean"),
        (dict(choice=[]), "1 to 1024"),
        (dict(choice=["a", ""]), "non-empty"),
        (dict(regex="a" * 70000), "at most 65536"),
        (dict(json={"enum": ["x" * 70000]}), "at most 65536"),
    ],
)
def test_malformed_params_are_refused(spec, message):
    with pytest.raises(SamplingParamsError, match=message):
        StructuredOutputParams(**spec)


def test_params_survive_the_wire():
    from paged_engine import wire

    params = SamplingParams(structured_output=StructuredOutputParams(json=SCHEMA))
    message = wire.AddRequest("r", [1, 2], params, 0.0)
    decoded = wire.decode_to_core(wire.encode(message))
    assert decoded.sampling_params.structured_output == params.structured_output
    assert decoded.sampling_params.structured_output.key == params.structured_output.key


def test_a_row_that_goes_on_after_its_grammar_ended_may_only_repeat_the_stop_token(compiler, tokenizer):
    """``ignore_eos``: the request continues past the grammar's stop token; its grammar is done, not broken."""
    spec = StructuredOutputParams(choice=["ok"])
    row = SamplingRow.create(SamplingParams(temperature=1.0, seed=0, ignore_eos=True, structured_output=spec), [1])
    row.output_token_ids.extend([*tokenizer.encode("ok", add_special_tokens=False), EOS])
    structured = StructuredOutput(compiler)
    for _ in range(3):
        metadata = SamplingMetadata.build([row], VOCAB, [EOS], structured_output=structured)
        token = Sampler()(torch.randn(1, VOCAB), metadata).sampled_token_ids.item()
        assert token == EOS
        row.output_token_ids.append(token)
