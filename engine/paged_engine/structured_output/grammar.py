"""Grammars for structured output, built with xgrammar.

Two stages, on the two sides of the process boundary:

* ``check`` parses a constraint into a grammar without any vocabulary, so the API server refuses a bad schema,
  regex or grammar with a 400 naming the field before anything is queued.
* ``GrammarCompiler`` compiles it against the served model's vocabulary (in the engine-core process, where the
  model runner applies it) and hands out one matcher per request. The vocabulary's token table is built on the
  first constrained request (a few seconds for a 262,144-token vocabulary), so the plain path pays nothing;
  compiled grammars are cached by constraint.

JSON is generated compact (``", "`` and ``": "`` separators, no free whitespace): a small model given free
whitespace can emit newlines until ``max_tokens``, which is never valid JSON. Its string rules come from
``json_strings``, which repairs the ones xgrammar builds that admit raw control characters.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from paged_engine.sampling_params import SamplingParamsError, StructuredOutputParams
from paged_engine.structured_output.json_strings import schema_grammar

if TYPE_CHECKING:
    import xgrammar

    from paged_engine.tokenizer import FastTokenizer

# xgrammar's messages start with a timestamp and a C++ source location: not for the client.
_LOCATION = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
MAX_CACHED_GRAMMARS = 256  # compiled grammars kept (oldest dropped first)


def load_library() -> Any:
    """xgrammar (imported on first use: it brings in transformers, about 2 s)."""
    import xgrammar

    return xgrammar


_xgr = load_library


def _message(exc: Exception) -> str:
    return _LOCATION.sub("", str(exc).strip()).strip()


def choice_ebnf(choices: Sequence[str]) -> str:
    """A grammar matching exactly one of ``choices`` (JSON string literals are valid EBNF literals here)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def _schema(spec: StructuredOutputParams) -> str:
    if spec.json_object:
        return json.dumps(JSON_OBJECT_SCHEMA)
    return spec.json if isinstance(spec.json, str) else json.dumps(spec.json)


def _grammar(spec: StructuredOutputParams) -> xgrammar.Grammar:
    xgr = _xgr()
    kind = spec.kind
    if kind in ("json", "json_object"):
        return schema_grammar(_schema(spec))
    if kind == "regex":
        return xgr.Grammar.from_regex(spec.regex)
    if kind == "choice":
        return xgr.Grammar.from_ebnf(choice_ebnf(spec.choice or []))
    return xgr.Grammar.from_ebnf(spec.grammar)


def check(spec: StructuredOutputParams) -> None:
    """Raises ``SamplingParamsError`` (param ``structured_output.<kind>``) if the constraint cannot be parsed."""
    try:
        _grammar(spec)
    except (RuntimeError, ValueError) as exc:
        kind = spec.kind
        raise SamplingParamsError(f"structured_output.{kind}", f"invalid {kind} constraint: {_message(exc)}") from None


class GrammarCompiler:
    """Compiles constraints against one model's vocabulary. ``load_tokenizer`` is called once, on first use;
    ``vocab_size`` is the model's (its logits' width, which may exceed the tokenizer's)."""

    def __init__(
        self,
        load_tokenizer: Callable[[], FastTokenizer],
        vocab_size: int,
        stop_token_ids: Sequence[int],
        max_threads: int = 2,
    ) -> None:
        self._load_tokenizer = load_tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = list(stop_token_ids)
        self.max_threads = max_threads
        self._compiler: xgrammar.GrammarCompiler | None = None
        self._cache: dict[tuple[str, str], xgrammar.CompiledGrammar] = {}
        self._lock = threading.Lock()

    def _get_compiler(self) -> xgrammar.GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                import transformers

                xgr = _xgr()
                tokenizer = self._load_tokenizer()
                hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend)
                info = xgr.TokenizerInfo.from_huggingface(
                    hf, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids or None
                )
                self._compiler = xgr.GrammarCompiler(info, max_threads=self.max_threads)
            return self._compiler

    def compile(self, spec: StructuredOutputParams) -> xgrammar.CompiledGrammar:
        """The constraint's grammar for this vocabulary (cached); ``SamplingParamsError`` if it is invalid."""
        key = spec.key
        compiled = self._cache.get(key)
        if compiled is not None:
            return compiled
        compiler = self._get_compiler()
        try:
            compiled = compiler.compile_grammar(_grammar(spec))
        except (RuntimeError, ValueError) as exc:
            kind = spec.kind
            raise SamplingParamsError(
                f"structured_output.{kind}", f"invalid {kind} constraint: {_message(exc)}"
            ) from None
        if len(self._cache) >= MAX_CACHED_GRAMMARS:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = compiled
        return compiled

    def matcher(self, spec: StructuredOutputParams) -> xgrammar.GrammarMatcher:
        return _xgr().GrammarMatcher(self.compile(spec))
