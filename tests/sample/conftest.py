"""Fixtures of the structured-output tests without a model: the byte-level tokenizer and its grammar compiler."""

from __future__ import annotations

import pytest
from grammar_helpers import EOS, VOCAB, byte_tokenizer
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.tokenizer import FastTokenizer


@pytest.fixture(scope="module")
def tokenizer() -> FastTokenizer:
    return byte_tokenizer()


@pytest.fixture(scope="module")
def compiler(tokenizer: FastTokenizer) -> GrammarCompiler:
    return GrammarCompiler(lambda: tokenizer, VOCAB, [EOS])
