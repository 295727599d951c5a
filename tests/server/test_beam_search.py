"""Beam search through the server with the official ``openai`` client (vLLM's extra parameters in ``extra_body``),
on the tiny random Gemma 3: the same beams as ``LLM.beam_search`` in-process, and clear 400s for what beam search
cannot combine with."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from paged_engine import LLM

pytestmark = [pytest.mark.server, pytest.mark.gemma]

PROMPT = [2, 818, 5279, 529, 7001, 563]  # token ids, so both sides see exactly the same prompt
BEAMS = {"use_beam_search": True, "length_penalty": 0.5, "early_stopping": True}


@pytest.fixture(scope="module")
def expected(tiny_gemma_dir: Path) -> list[str]:
    llm = LLM(str(tiny_gemma_dir), kv_cache_memory=64 << 20, max_model_len=1024, num_threads=1)
    output = llm.beam_search(PROMPT, 3, max_tokens=8, length_penalty=0.5, early_stopping=True)[0]
    return [c.text for c in output.outputs]


def test_completions_return_every_beam_best_first(client: openai.OpenAI, expected: list[str]) -> None:
    response = client.completions.create(model="tiny-gemma", prompt=PROMPT, n=3, max_tokens=8, extra_body=BEAMS)
    choices = sorted(response.choices, key=lambda c: c.index)
    assert [c.index for c in choices] == [0, 1, 2]
    assert [c.text for c in choices] == expected
    assert all(c.finish_reason in ("stop", "length") for c in choices)
    assert response.usage.completion_tokens >= 3


def test_chat_completions_with_beams(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    response = client.chat.completions.create(
        model="tiny-gemma", messages=messages, n=2, max_tokens=6, extra_body={"use_beam_search": True}
    )
    assert sorted(c.index for c in response.choices) == [0, 1]
    again = client.chat.completions.create(
        model="tiny-gemma", messages=messages, n=2, max_tokens=6, extra_body={"use_beam_search": True}
    )
    assert [c.message.content for c in again.choices] == [c.message.content for c in response.choices]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 0.8}, "temperature"),
        ({"top_p": 0.5}, "top_p"),
        ({"stream": True}, "stream"),
        ({"n": 100}, "n"),
        ({"stop": ["."]}, "stop"),
        ({"logprobs": 2}, "logprobs"),
        ({"extra_body": {"use_beam_search": True, "early_stopping": "sometimes"}}, "early_stopping"),
    ],
)
def test_bad_combinations_are_400s_naming_the_field(client: openai.OpenAI, kwargs: dict, param: str) -> None:
    settings = {
        "model": "tiny-gemma",
        "prompt": PROMPT,
        "n": 2,
        "max_tokens": 4,
        "extra_body": {"use_beam_search": True},
    }
    settings.update(kwargs)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(**settings)
    assert caught.value.body["param"] == param, caught.value.body
    assert param in caught.value.body["message"], caught.value.body


def test_a_width_above_max_num_seqs_is_refused_by_the_engine(client: openai.OpenAI) -> None:
    # above --max-num-seqs 32, the beams could not all run at once; the engine core refuses it on admission
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-gemma", prompt=PROMPT, n=40, max_tokens=4, extra_body=BEAMS)
    assert "n=40 exceeds max_num_seqs=32" in caught.value.body["message"], caught.value.body
