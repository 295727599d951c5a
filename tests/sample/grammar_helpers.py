"""Shared helpers for structured-output tests without a model: a byte-level vocabulary (one token per byte, plus
EOS) and sampling under grammar masks from random logits."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import torch
from hypothesis import strategies as st
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, StructuredOutput
from paged_engine.sampling_params import SamplingParams, StructuredOutputParams
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.tokenizer import FastTokenizer

EOS = 0
VOCAB = 300  # wider than the tokenizer's 257 ids, as a model's padded vocabulary is: the tail must be masked


def byte_tokenizer() -> FastTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={"<eos>": EOS, **{ch: i + 1 for i, ch in enumerate(alphabet)}}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<eos>"])
    return FastTokenizer(backend, bos_token=None, eos_token="<eos>")


def byte_token_ids(tokenizer: FastTokenizer, raw: bytes) -> list[int]:
    """The byte-level tokens of ``raw``, which need not be valid UTF-8 (as a model's byte tokens need not be)."""
    from tokenizers import pre_tokenizers

    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    chars = {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}
    assert set(chars.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    return [tokenizer.backend.token_to_id(chars[b]) for b in raw]


def generate_rows(
    compiler: GrammarCompiler, specs: list[StructuredOutputParams | None], steps: int = 80, seed: int = 0
) -> list[SamplingRow]:
    """Sample every row with random logits until each has sampled EOS (or ``steps`` ran out)."""
    structured = StructuredOutput(compiler)
    rows = [
        SamplingRow.create(SamplingParams(temperature=1.0, seed=seed + i, structured_output=spec), [1])
        for i, spec in enumerate(specs)
    ]
    live = list(range(len(rows)))
    logits_gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if not live:
            break
        batch = [rows[i] for i in live]
        metadata = SamplingMetadata.build(batch, VOCAB, [EOS], structured_output=structured)
        logits = torch.randn(len(batch), VOCAB, generator=logits_gen) * 3
        tokens = Sampler()(logits, metadata).sampled_token_ids.tolist()
        for i, token in zip(list(live), tokens, strict=True):
            rows[i].output_token_ids.append(token)
            if token == EOS:
                live.remove(i)
    return rows


def text_of(tokenizer: FastTokenizer, row: SamplingRow) -> str:
    return tokenizer.decode([t for t in row.output_token_ids if t != EOS])


def generate(
    compiler: GrammarCompiler, tokenizer: FastTokenizer, specs: list[StructuredOutputParams | None], steps: int = 80
) -> list[str]:
    return [text_of(tokenizer, row) for row in generate_rows(compiler, specs, steps)]


# --- generated constraints: JSON schemas whose strings may hold what a JSON string must escape ---

# Characters a JSON string may not hold raw (quote, backslash, control), and a few it may.
TRICKY_CHARS = 'a"\\\n\t\x01\x1f/ é'
PATTERNS = [
    r"^[a-z]{1,4}$",
    r'^"[^"]{0,3}"$',
    r"^\\[0-9]$",
    r"^a.b$",
    r"^[^x]{0,4}$",
    r"^\t\n$",
    r"^[\x00-\x1f]{1,2}$",
    r'^(ab|c")+$',
]
FORMATS = ["date", "time", "date-time", "email", "ipv4", "ipv6", "uuid", "hostname", "uri"]


def _length_bounds(draw: st.DrawFn) -> dict[str, int]:
    low = draw(st.integers(0, 3))
    bounds = {"minLength": low, "maxLength": draw(st.integers(low, 8))}
    keep = draw(st.sampled_from([("minLength",), ("maxLength",), ("minLength", "maxLength")]))
    return {key: bounds[key] for key in keep}


@st.composite
def string_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "length", "pattern", "format", "enum"]))
    if kind == "length":
        return {"type": "string", **_length_bounds(draw)}
    if kind == "pattern":
        return {"type": "string", "pattern": draw(st.sampled_from(PATTERNS))}
    if kind == "format":
        return {"type": "string", "format": draw(st.sampled_from(FORMATS))}
    if kind == "enum":
        values = draw(st.lists(st.text(TRICKY_CHARS, max_size=4), min_size=1, max_size=3, unique=True))
        return {"enum": values}
    return {"type": "string"}


@st.composite
def number_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["integer", "number"]))
    low = draw(st.integers(-50, 50))
    return {"type": kind, "minimum": low, "maximum": low + draw(st.integers(0, 100))}


LEAVES = st.one_of(
    string_schemas(), number_schemas(), st.sampled_from([{"type": "boolean"}, {"type": "null"}, {"const": "a\x01"}])
)
PROPERTY_NAMES = st.text(TRICKY_CHARS, min_size=1, max_size=3)


@st.composite
def _containers(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    kind = draw(st.sampled_from(["array", "object", "map", "pattern_map"]))
    if kind == "array":
        low = draw(st.integers(0, 2))
        return {"type": "array", "items": draw(children), "minItems": low, "maxItems": low + draw(st.integers(0, 2))}
    if kind == "object":
        properties = draw(st.dictionaries(PROPERTY_NAMES, children, min_size=1, max_size=3))
        required = [name for name in properties if draw(st.booleans())]
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    if kind == "map":  # free property names, bounded in length
        return {
            "type": "object",
            "propertyNames": {"maxLength": draw(st.integers(1, 4))},
            "additionalProperties": draw(children),
            "maxProperties": 2,
        }
    return {
        "type": "object",
        "patternProperties": {draw(st.sampled_from(PATTERNS)): draw(children)},
        "additionalProperties": False,
        "maxProperties": 2,
    }


def json_schemas() -> st.SearchStrategy[dict[str, Any]]:
    """Small schemas: nested arrays and objects over strings of every kind, numbers, booleans and null."""
    return st.recursive(LEAVES, _containers, max_leaves=4)


@st.composite
def regexes(draw: st.DrawFn) -> str:
    """Small ``guided_regex`` patterns: characters a JSON string escapes, classes, groups, bounded repeats."""
    atoms = st.sampled_from(["a", '"', "\\\\", "\\n", "\\t", "[\\x00-\\x1f]", "[^a-z]", "[0-9]", "(ab|c)", "é"])
    parts = draw(st.lists(st.tuples(atoms, st.sampled_from(["", "?", "{1,3}", "*"])), min_size=1, max_size=4))
    return "".join(atom + repeat for atom, repeat in parts)


def strict_json(text: str) -> Any:
    """``json.loads`` as RFC 8259 reads it: no raw control characters in strings, no NaN or Infinity."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, strict=True, parse_constant=refuse)


def schema_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A validator that checks formats too (those jsonschema can check here)."""
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)
