"""Build a Hugging Face ``tokenizers`` tokenizer from the tokenizer a GGUF file describes.

A GGUF carries no ``tokenizer.json``: llama.cpp stores the vocabulary, per-token scores and types, and the
special ids as metadata. For ``tokenizer.ggml.model == "llama"`` (SentencePiece BPE with byte fallback:
Llama 2, Gemma 1-3, Mistral v1 ...) the file lists no merges either; they are recovered from the vocabulary:
every way of cutting a token into two tokens is a merge, ranked by the token's position in the file (which
is SentencePiece's merge order; Gemma's scores put the multi-space tokens last although they merge first).
For ``"gpt2"`` (byte-level BPE: Llama 3, Qwen ...) the merges are in the file and ``tokenizer.ggml.pre``
names the regex that splits text first. Either way this is the tokenizer transformers builds from the file
(``AutoTokenizer.from_pretrained(..., gguf_file=...)``), checked token-for-token in ``tests/tokenizer``.

The result is written out as a Hugging Face tokenizer folder (see ``loader.py``), so the one loading path
for folders serves GGUF models too, and the seconds of conversion are paid once per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

# llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SPIECE_SPACE = "\u2581"

# Control tokens that end a turn in chat models; llama.cpp also treats these as end of generation.
END_OF_TURN_TOKENS = ("<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<EOT>")

TOKENIZER_ARRAYS = frozenset(
    {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"}
)


class UnsupportedTokenizerError(ValueError):
    """The GGUF describes a tokenizer model this converter does not build."""


@dataclass
class ConvertedTokenizer:
    """A ``tokenizers`` tokenizer plus what ``tokenizer_config.json`` / ``generation_config.json`` would hold."""

    tokenizer: Tokenizer
    special_tokens: dict[str, str]  # bos_token, eos_token, unk_token, pad_token -> token text
    add_bos_token: bool
    add_eos_token: bool
    eos_token_ids: list[int]  # every id that ends generation, the primary EOS first
    chat_template: str | None


def convert_gguf_tokenizer(metadata: dict[str, Any]) -> ConvertedTokenizer:
    """Convert from metadata read with ``read_gguf_metadata(path, TOKENIZER_ARRAYS)``."""
    model = metadata.get("tokenizer.ggml.model")
    if model not in _BUILDERS:
        raise UnsupportedTokenizerError(
            f"GGUF tokenizer model {model!r} is not supported; supported: {sorted(_BUILDERS)}. "
            "Point the engine at a Hugging Face folder with a tokenizer.json instead."
        )
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types = [int(t) for t in metadata.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    if len(types) != len(tokens):
        raise ValueError(f"GGUF has {len(tokens)} tokens but {len(types)} token types")

    def special(key: str) -> int | None:
        value = metadata.get(f"tokenizer.ggml.{key}")
        if value is not None and not 0 <= int(value) < len(tokens):
            raise ValueError(f"tokenizer.ggml.{key} = {value} is outside the vocabulary [0, {len(tokens)})")
        return None if value is None else int(value)

    unk_id = special("unknown_token_id")
    tokenizer, vocab_spelling, default_add_bos = _BUILDERS[model](
        metadata, tokens, tokens[unk_id] if unk_id is not None else None
    )
    # Control tokens are matched whole and are special (skipped on decode); user-defined ones are matched
    # whole but are text. (SentencePiece whitespace runs, respelled for the vocabulary, go through BPE.)
    control = [tok for tok, kind in zip(tokens, types, strict=True) if kind == CONTROL]
    tokenizer.add_special_tokens([AddedToken(tok, special=True, normalized=False) for tok in control])
    tokenizer.add_tokens(
        [
            AddedToken(tok, special=False, normalized=False)
            for tok, spelled, kind in zip(tokens, vocab_spelling, types, strict=True)
            if kind == USER_DEFINED and tok == spelled
        ]
    )

    bos_id, eos_id = special("bos_token_id"), special("eos_token_id")
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", default_add_bos))
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False))
    tokenizer.post_processor = bos_eos_processor(
        tokens[bos_id] if add_bos and bos_id is not None else None,
        bos_id,
        tokens[eos_id] if add_eos and eos_id is not None else None,
        eos_id,
    )
    names = {"bos_token": bos_id, "eos_token": eos_id, "unk_token": unk_id, "pad_token": special("padding_token_id")}
    return ConvertedTokenizer(
        tokenizer=tokenizer,
        special_tokens={name: tokens[i] for name, i in names.items() if i is not None},
        add_bos_token=add_bos and bos_id is not None,
        add_eos_token=add_eos and eos_id is not None,
        eos_token_ids=_end_of_generation_ids(metadata, tokens, types, eos_id),
        chat_template=metadata.get("tokenizer.chat_template"),
    )


def _sentencepiece(metadata: dict[str, Any], tokens: list[str], unk: str | None) -> tuple[Tokenizer, list[str], bool]:
    """SentencePiece BPE with byte fallback; merges recovered from the vocabulary (the file has none)."""
    spelled = [_respell(token) for token in tokens]
    vocab = _vocab(spelled)
    tokenizer = Tokenizer(
        BPE(vocab=vocab, merges=_merges(spelled, vocab), unk_token=unk, fuse_unk=True, byte_fallback=True)
    )
    decoder_steps = [decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if metadata.get("tokenizer.ggml.add_space_prefix", True):
        # Llama-2 style: a space marker before the first word only, stripped again on decode.
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(SPIECE_SPACE, prepend_scheme="first", split=False)
        decoder_steps.append(decoders.Strip(content=" ", left=1, right=0))
    else:
        tokenizer.normalizer = normalizers.Replace(" ", SPIECE_SPACE)
    tokenizer.decoder = decoders.Sequence(decoder_steps)
    return tokenizer, spelled, True  # llama.cpp adds BOS to SentencePiece vocabularies unless told otherwise


def _byte_level(metadata: dict[str, Any], tokens: list[str], unk: str | None) -> tuple[Tokenizer, list[str], bool]:
    """GPT-2 style byte-level BPE (Llama 3, Qwen ...): merges are in the file, the split regex is named by
    ``tokenizer.ggml.pre``."""
    merges = metadata.get("tokenizer.ggml.merges")
    if not merges:
        raise ValueError("a byte-level BPE GGUF must list tokenizer.ggml.merges")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in BYTE_LEVEL_SPLITS:
        raise UnsupportedTokenizerError(
            f"GGUF pre-tokenizer {pre!r} is not supported; supported: {sorted(BYTE_LEVEL_SPLITS)}"
        )
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(BPE(vocab=_vocab(tokens), merges=pairs, unk_token=unk, fuse_unk=False, byte_fallback=False))
    split = BYTE_LEVEL_SPLITS[pre]
    if split is None:  # GPT-2's own pattern, built into the ByteLevel pre-tokenizer
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, tokens, False


def _vocab(tokens: Sequence[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)  # a token spelled twice keeps its first id
    return vocab


_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's pre-tokenizer names -> the regex that splits text before byte-level BPE (None: GPT-2's own).
BYTE_LEVEL_SPLITS: dict[str, str | None] = {
    "default": None,
    "gpt-2": None,
    "gpt2": None,
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "llama-bpe": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}

_BUILDERS = {"llama": _sentencepiece, "gpt2": _byte_level}


def bos_eos_processor(
    bos: str | None, bos_id: int | None, eos: str | None, eos_id: int | None
) -> processors.TemplateProcessing | None:
    """A post-processor adding BOS and/or EOS around a single sequence (or None when neither is added)."""
    if bos is None and eos is None:
        return None
    prefix = [bos] if bos is not None else []
    suffix = [eos] if eos is not None else []
    specials = [(token, token_id) for token, token_id in ((bos, bos_id), (eos, eos_id)) if token is not None]
    return processors.TemplateProcessing(
        single=" ".join([*prefix, "$A", *suffix]),
        pair=" ".join([*prefix, "$A", *suffix, *prefix, "$B:1", *suffix]),
        special_tokens=list(dict.fromkeys(specials)),
    )


def _respell(token: str) -> str:
    """Whitespace runs are stored with real spaces; the model text (after normalization) spells them '▁'."""
    if " " in token and not token.strip():
        return token.replace(" ", SPIECE_SPACE)
    return token


def _merges(tokens: Sequence[str], vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of a token into two vocabulary tokens, in file order; within a token, longer left part first."""
    merges: list[tuple[str, str]] = []
    for token in tokens:
        for cut in range(len(token) - 1, 0, -1):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                merges.append((left, right))
    return list(dict.fromkeys(merges))  # a token spelled twice in the file yields its merges once


def _end_of_generation_ids(
    metadata: dict[str, Any], tokens: Sequence[str], types: Sequence[int], eos_id: int | None
) -> list[int]:
    ids = [eos_id] if eos_id is not None else []
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        if metadata.get(key) is not None:
            ids.append(int(metadata[key]))
    by_text = {token: i for i, token in enumerate(tokens) if types[i] == CONTROL}
    ids.extend(by_text[token] for token in END_OF_TURN_TOKENS if token in by_text)
    return list(dict.fromkeys(ids))
