"""The soak's request mix: what each simulated client sends and how it behaves while the answer arrives.

Pure and seeded: ``draw_case(rng, limits)`` is the only source of requests, so a run is reproducible from its
seed and the mix can be checked without a server. Every case states what a correct server does with it:
``Behaviour.REFUSED`` cases must get a 400 naming ``expect_param``; all others must be served in full (or be
cut off by the client on purpose), so anything else the server answers is an unexpected error.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any


class Behaviour(enum.StrEnum):
    READ_ALL = "read_all"  # read the whole answer at once
    SLOW_READER = "slow_reader"  # streaming, sleeps between chunks
    ABORT_STREAM = "abort_stream"  # streaming, hangs up after a few chunks
    ABORT_WAIT = "abort_wait"  # non-streaming, gives up before the answer
    REFUSED = "refused"  # an invalid request: the server must answer 400 naming the field


@dataclass(frozen=True)
class Limits:
    """What the server under test was started with (bounds the cases drawn)."""

    max_model_len: int
    model: str
    max_n: int = 3
    max_tokens: int = 24


@dataclass(frozen=True)
class Case:
    path: str  # /v1/completions or /v1/chat/completions
    body: dict[str, Any]
    behaviour: Behaviour
    abort_after_chunks: int = 0
    read_delay_s: float = 0.0
    expect_param: str | None = None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def n(self) -> int:
        return int(self.body.get("n", 1))

    @property
    def stops(self) -> list[str]:
        stop = self.body.get("stop")
        return [] if stop is None else [stop] if isinstance(stop, str) else list(stop)

    @property
    def label(self) -> str:
        kind = "chat" if self.path.endswith("chat/completions") else "completion"
        long = "-long" if isinstance(self.body.get("prompt"), list) else ""
        return f"{kind}{long}-{'stream' if self.stream else 'json'}-{self.behaviour}"


# (behaviour, weight): most clients read their answer; a steady minority misbehaves.
BEHAVIOURS = [
    (Behaviour.READ_ALL, 70), (Behaviour.SLOW_READER, 8), (Behaviour.ABORT_STREAM, 12),
    (Behaviour.ABORT_WAIT, 5), (Behaviour.REFUSED, 5),
]  # fmt: skip
STOP_STRINGS = ["e", ".", "\n", " the", "a"]
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards", "quietly",
    "hex", "every", "jolly", "knight",
]  # fmt: skip
TOKEN_RANGE = (1000, 200_000)  # ordinary vocabulary ids of the Gemma tokenizer (no special tokens)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _sampling(rng: random.Random, limits: Limits, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": limits.model, "max_tokens": rng.randint(1, limits.max_tokens)}
    if rng.random() < 0.4:
        body["n"] = rng.randint(2, limits.max_n)
    if rng.random() < 0.5:
        body["temperature"] = 0.0
    else:
        body["temperature"] = rng.choice([0.7, 1.0])
        body["seed"] = rng.randint(0, 2**31)
    if rng.random() < 0.35:
        body["stop"] = rng.sample(STOP_STRINGS, rng.randint(1, 2))
    if rng.random() < 0.3:
        body["ignore_eos"] = True
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


def _completion(rng: random.Random, limits: Limits, stream: bool, long: bool) -> dict[str, Any]:
    body = _sampling(rng, limits, stream)
    if long:  # a prompt that leaves room for just its own answer
        room = body["max_tokens"] + rng.randint(0, 8)
        body["prompt"] = [rng.randrange(*TOKEN_RANGE) for _ in range(limits.max_model_len - room)]
    else:
        body["prompt"] = _text(rng, rng.randint(3, 60))
    if rng.random() < 0.3:
        body["logprobs"] = rng.randint(0, 5)
    return body


def _chat(rng: random.Random, limits: Limits, stream: bool) -> dict[str, Any]:
    body = _sampling(rng, limits, stream)
    messages: list[dict[str, str]] = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": _text(rng, 8)})
    for turn in range(rng.choice([1, 1, 3])):  # user and assistant alternate, ending with the user
        messages.append({"role": "assistant" if turn % 2 else "user", "content": _text(rng, rng.randint(2, 40))})
    body["messages"] = messages
    if rng.random() < 0.3:
        body["logprobs"] = True
        body["top_logprobs"] = rng.randint(0, 5)
    return body


def _refused(rng: random.Random, limits: Limits) -> Case:
    """Requests a correct server refuses: a prompt over the context, or more tokens than the context holds."""
    if rng.random() < 0.5:
        prompt = [rng.randrange(*TOKEN_RANGE) for _ in range(limits.max_model_len + rng.randint(1, 32))]
        body = {"model": limits.model, "prompt": prompt, "max_tokens": 4}
        return Case("/v1/completions", body, Behaviour.REFUSED, expect_param="prompt")
    body = {"model": limits.model, "prompt": _text(rng, 5), "max_tokens": limits.max_model_len + rng.randint(0, 99)}
    return Case("/v1/completions", body, Behaviour.REFUSED, expect_param="max_tokens")


def draw_case(rng: random.Random, limits: Limits) -> Case:
    behaviour = rng.choices([b for b, _ in BEHAVIOURS], [w for _, w in BEHAVIOURS])[0]
    if behaviour is Behaviour.REFUSED:
        return _refused(rng, limits)
    stream = behaviour in (Behaviour.SLOW_READER, Behaviour.ABORT_STREAM) or (
        behaviour is Behaviour.READ_ALL and rng.random() < 0.5
    )
    if behaviour is Behaviour.ABORT_STREAM or behaviour is Behaviour.ABORT_WAIT:
        limits = Limits(limits.max_model_len, limits.model, limits.max_n, max_tokens=200)  # long enough to cut off
    if rng.random() < 0.55:
        body = _completion(rng, limits, stream, long=rng.random() < 0.15)
        path = "/v1/completions"
    else:
        body = _chat(rng, limits, stream)
        path = "/v1/chat/completions"
    if behaviour in (Behaviour.ABORT_STREAM, Behaviour.ABORT_WAIT):
        body["ignore_eos"] = True
        body.pop("stop", None)  # so the answer is still running when the client leaves
    return Case(
        path, body, behaviour,
        abort_after_chunks=rng.randint(1, 6) if behaviour is Behaviour.ABORT_STREAM else 0,
        read_delay_s=rng.uniform(0.05, 0.25) if behaviour is Behaviour.SLOW_READER else 0.0,
    )  # fmt: skip
