"""Our GGUF tokenizer conversion encodes exactly like transformers' GGUF conversion (the reference)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from paged_engine.tokenizer import load_tokenizer
from transformers import AutoTokenizer

FRAGMENTS = [
    "Hello",
    " world",
    "  ",
    "    ",
    "\t",
    "\n",
    "\n\n\n",
    " \n ",
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "ünïcödé",
    "naïve café",
    "日本語のテキスト",
    "中文字符",
    "한국어",
    "العربية",
    "עברית",
    "Ελληνικά",
    "😀",
    "👩‍👩‍👧‍👦",
    "🇫🇷",
    "\u200b",
    "\u00a0",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\ue000",  # private use: byte fallback
    "\x07",
    "<start_of_turn>",
    "<end_of_turn>",
    "<eos>",
    "<b>bold</b>",
    "https://example.com/a?b=c&d=e",
    "1234567890",
    "3.14159",
    "$$\\frac{a}{b}$$",
    "...",
    "—",
    "'quoted'",
    '"double"',
    "CamelCaseIdentifier",
    "snake_case_identifier",
    "ALLCAPS",
]

HANDWRITTEN = [
    "",
    " ",
    "a",
    " leading space",
    "trailing space ",
    "multiple   spaces   inside",
    "\n\nnewlines\t\ttabs",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "emoji 😀🙂 mixed",
    "   \n\t  \r\n",
]


def corpus(size: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = list(HANDWRITTEN)
    while len(texts) < size:
        texts.append("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 8))))
    return texts


@pytest.mark.gemma
@pytest.mark.slow
def test_matches_transformers_gguf_conversion(gemma_gguf: Path, tmp_path: Path):
    reference = AutoTokenizer.from_pretrained(str(gemma_gguf.parent), gguf_file=gemma_gguf.name)
    ours = load_tokenizer(gemma_gguf, cache_dir=tmp_path)  # a fresh conversion, not a cached one
    assert ours.vocab_size == len(reference)
    assert ours.bos_token_id == reference.bos_token_id
    assert ours.eos_token_id == reference.eos_token_id
    for text in corpus():
        expected = reference.encode(text)
        assert ours.encode(text) == expected, text
        assert ours.encode(text, add_special_tokens=False) == reference.encode(text, add_special_tokens=False), text
        assert ours.decode(expected) == reference.decode(expected, skip_special_tokens=True), text
        assert ours.decode(expected, skip_special_tokens=False) == reference.decode(expected), text
