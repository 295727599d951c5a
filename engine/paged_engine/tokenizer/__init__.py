"""Tokenizers (Hugging Face folders and GGUF metadata), chat templates and streaming detokenization. Runs in the
API server process (and the user's for ``LLM``); the engine core loads one only to compile grammars."""

from paged_engine.tokenizer.chat_template import ChatTemplate, ChatTemplateError
from paged_engine.tokenizer.detokenizer import IncrementalDetokenizer
from paged_engine.tokenizer.loader import load_tokenizer
from paged_engine.tokenizer.tokenizer import FastTokenizer, Tokenizer

__all__ = [
    "ChatTemplate",
    "ChatTemplateError",
    "FastTokenizer",
    "IncrementalDetokenizer",
    "Tokenizer",
    "load_tokenizer",
]
