"""Synthetic workloads: a list of prompts with target lengths, deterministic for a seed.

Prompts are text (any OpenAI-compatible server accepts text; not all accept token ids) built from a fixed
word list. With a tokenizer the prompt is cut to exactly the target token count (re-encoding the decoded
cut can differ by a token or two at the boundary; ``prompt_tokens`` records the count that was measured).
Without one, one word is taken as one token, which is close for common English words and the usual
tokenizers; the server's ``usage`` then gives the true counts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Protocol

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no what can more up out about into only "
    "other time some could these two may first then do any like my now over such our man me even most made after "
    "also did many before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here between both life being "
    "under never day same another know while last might great old year off come since against go came right used "
    "take three place around however small found part again system number water house point paper memory block "
    "cache token model serve queue batch page table request budget kernel prefix engine stream"
)
WORDS = tuple(_WORD_TEXT.split())


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_tokens: int
    output_tokens: int


class DatasetError(ValueError):
    """A dataset parameter out of range."""


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise DatasetError(f"{name} must be >= 1, got {value}")


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def synth_text(rng: random.Random, num_tokens: int, tokenizer: Tokenizer | None) -> tuple[str, int]:
    """Text of about ``num_tokens`` tokens and its measured (or, without a tokenizer, estimated) length."""
    if num_tokens == 0:
        return "", 0
    if tokenizer is None:
        return _words(rng, num_tokens), num_tokens
    ids: list[int] = []
    words = num_tokens
    while len(ids) < num_tokens:  # words are >= 1 token each, so this ends after one or two rounds
        ids += tokenizer.encode(" " + _words(rng, words), add_special_tokens=False)
        words = num_tokens - len(ids) + 1
    text = tokenizer.decode(ids[:num_tokens])
    return text, len(tokenizer.encode(text, add_special_tokens=False))


def _range(rng: random.Random, mean: int, ratio: float) -> int:
    low, high = round(mean * (1 - ratio)), round(mean * (1 + ratio))
    return rng.randint(max(low, 1), max(high, 1))


def random_dataset(
    num_requests: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    tokenizer: Tokenizer | None = None,
    seed: int = 0,
) -> list[BenchRequest]:
    """Independent prompts; lengths uniform in ``[len * (1 - range_ratio), len * (1 + range_ratio)]``."""
    _positive("number of requests", num_requests)
    _positive("input length", input_len)
    _positive("output length", output_len)
    if not 0.0 <= range_ratio < 1.0:
        raise DatasetError(f"range ratio must be within [0, 1), got {range_ratio}")
    rng = random.Random(seed)
    out = []
    for _ in range(num_requests):
        text, measured = synth_text(rng, _range(rng, input_len, range_ratio), tokenizer)
        out.append(BenchRequest(text, measured, _range(rng, output_len, range_ratio)))
    return out


def shared_prefix_dataset(
    num_requests: int,
    num_prefixes: int,
    prefix_len: int,
    suffix_len: int,
    output_len: int,
    tokenizer: Tokenizer | None = None,
    seed: int = 0,
) -> list[BenchRequest]:
    """``num_prefixes`` system prompts of ``prefix_len`` tokens, each shared by an equal share of the requests
    (round robin), followed by a distinct ``suffix_len``-token question: the prefix cache's favourite case."""
    checks = {"number of requests": num_requests, "number of prefixes": num_prefixes, "prefix length": prefix_len}
    checks |= {"suffix length": suffix_len, "output length": output_len}
    for name, value in checks.items():
        _positive(name, value)
    if num_prefixes > num_requests:
        raise DatasetError(f"number of prefixes ({num_prefixes}) must be <= number of requests ({num_requests})")
    rng = random.Random(seed)
    prefixes = [synth_text(rng, prefix_len, tokenizer) for _ in range(num_prefixes)]
    out = []
    for index in range(num_requests):
        prefix, measured = prefixes[index % num_prefixes]
        suffix, suffix_measured = synth_text(rng, suffix_len, tokenizer)
        prompt = f"{prefix}\n\n{suffix}"
        count = len(tokenizer.encode(prompt, add_special_tokens=False)) if tokenizer else measured + suffix_measured
        out.append(BenchRequest(prompt, count, output_len))
    return out


@cache
def sharegpt_lengths() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The bundled (input lengths, output lengths) quantiles; see ``sharegpt_lengths.json`` for their origin."""
    data = json.loads(resources.files(__package__).joinpath("sharegpt_lengths.json").read_text())
    return tuple(data["input_lens"]), tuple(data["output_lens"])


def sharegpt_like_dataset(
    num_requests: int,
    tokenizer: Tokenizer | None = None,
    max_input_len: int | None = None,
    max_output_len: int | None = None,
    seed: int = 0,
) -> list[BenchRequest]:
    """Lengths drawn from the bundled ShareGPT-like distribution (clipped to the maxima), synthetic text."""
    _positive("number of requests", num_requests)
    for name, value in (("max input length", max_input_len), ("max output length", max_output_len)):
        if value is not None:
            _positive(name, value)
    inputs, outputs = sharegpt_lengths()
    rng = random.Random(seed)
    out = []
    for _ in range(num_requests):
        input_len, output_len = rng.choice(inputs), rng.choice(outputs)
        if max_input_len is not None:
            input_len = min(input_len, max_input_len)
        if max_output_len is not None:
            output_len = min(output_len, max_output_len)
        text, measured = synth_text(rng, input_len, tokenizer)
        out.append(BenchRequest(text, measured, output_len))
    return out
