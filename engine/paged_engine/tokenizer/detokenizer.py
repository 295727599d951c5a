"""Incremental detokenization for streaming: token ids in, text deltas out.

Decoding a SentencePiece or byte-level token on its own is wrong in general: its leading-space marker
depends on the decoder's view of what precedes it, and a byte-fallback token can be a fraction of a UTF-8
character. So each step decodes a short window twice, the tokens already emitted (``prefix_offset`` to
``read_offset``) and the same plus the new ones, and emits the difference; the window then slides forward.
While the decoded window ends in U+FFFD (an incomplete UTF-8 sequence) nothing is emitted and the window
grows until the character completes. Cost per step is a decode of a handful of tokens, independent of the
sequence length (the scheme used by TGI and vLLM).
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_engine.sampling_params import SamplingParams
from paged_engine.tokenizer.stop_strings import StopStrings
from paged_engine.tokenizer.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens decoded ahead of the first output token, so its leading space renders as in context.
PROMPT_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """One per request. ``update`` returns the text that became final; ``stop`` is set once a stop string hit."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int] = (),
        *,
        skip_special_tokens: bool = True,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        context = self._clean_context(prompt_token_ids[-PROMPT_CONTEXT_TOKENS:])
        self._ids = context
        self._num_context = len(context)
        self._prefix_offset = 0
        self._read_offset = len(context)
        self._stops = StopStrings(stop, include_stop_str_in_output)
        self._min_tokens = min_tokens  # as in vLLM, stop strings only count once min_tokens were generated
        self._text = ""
        self._emitted = 0
        self.stop: str | None = None

    @classmethod
    def from_params(
        cls, tokenizer: Tokenizer, prompt_token_ids: Sequence[int], params: SamplingParams
    ) -> IncrementalDetokenizer:
        return cls(
            tokenizer,
            prompt_token_ids,
            skip_special_tokens=params.skip_special_tokens,
            stop=params.stop,
            include_stop_str_in_output=params.include_stop_str_in_output,
            min_tokens=params.min_tokens,
        )

    def _clean_context(self, tail: Sequence[int]) -> list[int]:
        """The prompt tail, cut so it starts on a character boundary.

        A tail starting inside a byte-fallback character (say the last bytes of an emoji) decodes to U+FFFD,
        and byte decoders treat a run of byte tokens as one unit, so it would corrupt the first output
        characters that are themselves byte tokens.
        """
        context = list(tail)
        while context and REPLACEMENT_CHAR in self._tokenizer.decode(context, skip_special_tokens=self._skip_special):
            context.pop(0)
        return context

    @property
    def output_token_ids(self) -> list[int]:
        return self._ids[self._num_context :]

    @property
    def output_text(self) -> str:
        """All text decoded so far, cut at a stop string; may run ahead of what was streamed."""
        return self._text

    @property
    def finished(self) -> bool:
        return self.stop is not None

    def update(self, new_token_ids: Sequence[int]) -> str:
        """Feed the tokens sampled this step; returns the newly streamable text (possibly empty)."""
        if self.stop is not None:
            raise RuntimeError(f"update() after the stop string {self.stop!r} finished this request")
        unchecked = self._min_tokens - 1 - len(self.output_token_ids)  # tokens whose text cannot stop yet
        if 0 < unchecked < len(new_token_ids):
            # This step crosses min_tokens: decode the part that cannot stop the request on its own.
            self._ids.extend(new_token_ids[:unchecked])
            self._append(self._decode_new(final=False))
            new_token_ids = new_token_ids[unchecked:]
        self._ids.extend(new_token_ids)
        self._append(self._decode_new(final=False))
        return self._take(final=False)

    def flush(self) -> str:
        """The request finished (EOS, length, abort): release held-back text, incomplete characters included."""
        if self.stop is None:
            self._append(self._decode_new(final=True))
        return self._take(final=True)

    def _decode_new(self, final: bool) -> str:
        decode = self._tokenizer.decode
        prefix = decode(self._ids[self._prefix_offset : self._read_offset], skip_special_tokens=self._skip_special)
        full = decode(self._ids[self._prefix_offset :], skip_special_tokens=self._skip_special)
        if len(full) <= len(prefix) or (full.endswith(REPLACEMENT_CHAR) and not final):
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return full[len(prefix) :]

    def _append(self, delta: str) -> None:
        if not delta:
            return
        self._text += delta
        if self._stops and len(self._ids) - self._num_context >= self._min_tokens:
            match = self._stops.find(self._text, len(delta))
            if match is not None:
                self._text = self._text[: match.end]
                self.stop = match.stop

    def _take(self, final: bool) -> str:
        end = len(self._text)
        if not final and self.stop is None:
            end -= self._stops.holdback(self._text)
        end = max(end, self._emitted)
        delta = self._text[self._emitted : end]
        self._emitted = end
        return delta
