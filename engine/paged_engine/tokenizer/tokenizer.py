"""The tokenizer interface the engine uses, and its implementation over Hugging Face ``tokenizers``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from tokenizers import Tokenizer as _RustTokenizer

from paged_engine.tokenizer.chat_template import ChatTemplate, ChatTemplateError


@runtime_checkable
class Tokenizer(Protocol):
    """What the API server, detokenizer and engine need from a tokenizer."""

    @property
    def bos_token_id(self) -> int | None: ...

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def convert_ids_to_tokens(self, token_ids: Iterable[int]) -> list[str]: ...

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, **extra: Any
    ) -> str: ...


class FastTokenizer:
    """A ``tokenizers.Tokenizer`` plus the special-token facts that live outside ``tokenizer.json``.

    ``apply_chat_template`` returns text that already holds the template's special tokens (``<bos>`` for
    Gemma); encode it with ``add_special_tokens=False`` so BOS is not doubled.
    """

    def __init__(
        self,
        tokenizer: _RustTokenizer,
        *,
        bos_token: str | None,
        eos_token: str | None,
        extra_eos_token_ids: Iterable[int] = (),
        chat_template: ChatTemplate | None = None,
        name: str = "",
    ) -> None:
        self._tokenizer = tokenizer
        self.name = name
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._bos_id = self._id_of(bos_token, "bos_token")
        self._eos_id = self._id_of(eos_token, "eos_token")
        eos_ids = ([self._eos_id] if self._eos_id is not None else []) + list(extra_eos_token_ids)
        self._eos_ids = frozenset(eos_ids)
        self.chat_template = chat_template

    def _id_of(self, token: str | None, role: str) -> int | None:
        if token is None:
            return None
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{role} {token!r} is not in the vocabulary of {self.name or 'the tokenizer'}")
        return token_id

    @property
    def backend(self) -> _RustTokenizer:
        return self._tokenizer

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_token_id(self) -> int | None:
        return self._eos_id

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every token that ends generation: EOS plus end-of-turn tokens (Gemma's ``<end_of_turn>``)."""
        return self._eos_ids

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Many texts at once, in parallel in Rust."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [encoding.ids for encoding in encodings]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, token_ids: Iterable[int]) -> list[str]:
        tokens = []
        for token_id in token_ids:
            token = self._tokenizer.id_to_token(token_id)
            if token is None:
                raise ValueError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
            tokens.append(token)
        return tokens

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, **extra: Any
    ) -> str:
        if self.chat_template is None:
            raise ChatTemplateError(
                f"{self.name or 'this model'} has no chat template; pass one explicitly (a .jinja file or its text)"
            )
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **extra)
