"""Byte-level BPE GGUFs (Llama 3, Qwen): our conversion encodes like transformers' GGUF conversion."""

from __future__ import annotations

from pathlib import Path

import pytest
from paged_engine.tokenizer import IncrementalDetokenizer, load_tokenizer
from paged_engine.tokenizer.gguf_convert import UnsupportedTokenizerError, convert_gguf_tokenizer
from test_gguf_equivalence import corpus
from tiny_gguf import write_gguf
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer as reference_convert

MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ w", "o r", "l d", "Ġw or", "Ġwor ld", "1 2", "12 3"]
MERGES += ["Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ", "ï ¼", "æ Ĺ", "Ġ he", "l l", "he ll", "hell o", "Ġ hello"]


def byte_level_metadata(pre: str) -> dict:
    alphabet = list(bytes_to_unicode().values())
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *alphabet]
    tokens += [a + b for a, b in (m.split(" ") for m in MERGES) if a + b not in tokens]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return {
        "general.architecture": "qwen2",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
    }


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2"])
def test_matches_transformers_conversion(pre: str, tmp_path: Path):
    metadata = byte_level_metadata(pre)
    reference, _ = reference_convert(
        "qwen2",
        {
            "tokenizer_type": "gpt2",
            "pre_tokenizer_type": pre,
            "tokens": metadata["tokenizer.ggml.tokens"],
            "token_type": metadata["tokenizer.ggml.token_type"],
            "merges": MERGES,
        },
    )
    ours = load_tokenizer(write_gguf(tmp_path / "bpe.gguf", metadata), cache_dir=tmp_path / "cache")
    assert ours.eos_token_ids == {2}
    for text in [*corpus(120), "hello world 123 12345", "<|im_start|>user\nhi<|im_end|>", "  the\n\n  hello"]:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == expected, text
        assert ours.decode(expected) == reference.decode(expected, skip_special_tokens=True), text


def test_unknown_pre_tokenizer_and_missing_merges_are_refused():
    with pytest.raises(UnsupportedTokenizerError, match="pre-tokenizer 'mystery' is not supported"):
        convert_gguf_tokenizer(byte_level_metadata("mystery"))
    metadata = byte_level_metadata("qwen2")
    del metadata["tokenizer.ggml.merges"]
    with pytest.raises(ValueError, match=r"must list tokenizer\.ggml\.merges"):
        convert_gguf_tokenizer(metadata)


def test_streaming_byte_level_text_holds_partial_characters(tmp_path: Path):
    tok = load_tokenizer(write_gguf(tmp_path / "bpe.gguf", byte_level_metadata("qwen2")), cache_dir=tmp_path / "c")
    text = "hello 日本語 😀 wörld"
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok, tok.encode("<|im_start|>"))
    deltas = [detok.update([token]) for token in ids] + [detok.flush()]
    assert "".join(deltas) == text
    assert not any("\ufffd" in delta for delta in deltas)
