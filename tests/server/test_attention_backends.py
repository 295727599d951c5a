"""What a user gets by default (``--attention-backend auto``: our CPU kernels on this machine) and the portable torch
reference serve the same greedy tokens over HTTP: prompts inside one KV block, across several, past the sliding
window, a prefix-cache hit, a concurrent batch (batched decode in the kernels), streamed and not, completions and
chat; and the same log-probabilities, within fp32 rounding."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.server.conftest import (
    API_KEY,
    COMMON_ARGS,
    MODEL_NAME,
    ServerProcess,
    auto_attention,
    engine_info,
    start_server,
)

pytestmark = [pytest.mark.server, pytest.mark.gemma]

SENTENCE = "the paged cache keeps keys and values in blocks of sixteen tokens shared between requests "
PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog. Once upon a time,",  # inside one 16-token block
    SENTENCE * 6,  # about 90 tokens: several blocks
    SENTENCE * 24,  # about 350 tokens: past the 256-token sliding window of the local layers
]
GREEDY = {"max_tokens": 24, "temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def reference_server(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tiny_gemma_dir, tmp_path_factory.mktemp("logs"), *COMMON_ARGS, "--api-key", API_KEY, "--max-num-seqs", "32",
        "--attention-backend", "reference",
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture
def reference(reference_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{reference_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


def completions(client: openai.OpenAI, prompts: list[str], **kwargs: object) -> list[str]:
    """Every prompt sent at once, so the engine batches them."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(client.completions.create, model=MODEL_NAME, prompt=p, **kwargs) for p in prompts]
        return [f.result().choices[0].text for f in futures]


def test_the_default_serves_our_kernels_and_the_reference_what_it_was_asked(
    server: ServerProcess, reference_server: ServerProcess
) -> None:
    chosen = auto_attention()
    assert chosen.backend != "reference", f"auto falls back to the reference here: {chosen.reason}"
    assert engine_info(server)["attention_backend"] == chosen.backend
    assert engine_info(reference_server)["attention_backend"] == "reference"


def test_greedy_completions_are_the_same(client: openai.OpenAI, reference: openai.OpenAI) -> None:
    expected = completions(reference, PROMPTS, **GREEDY)
    assert completions(client, PROMPTS, **GREEDY) == expected
    # Again: the prompts' full blocks now come from the prefix cache.
    assert completions(client, PROMPTS, **GREEDY) == expected
    # One at a time (no batch) and streamed.
    for prompt, text in zip(PROMPTS, expected, strict=True):
        stream = client.completions.create(model=MODEL_NAME, prompt=prompt, stream=True, **GREEDY)
        assert "".join(chunk.choices[0].text for chunk in stream if chunk.choices) == text


def test_greedy_chat_is_the_same(client: openai.OpenAI, reference: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": SENTENCE * 3}]
    expected = reference.chat.completions.create(model=MODEL_NAME, messages=messages, **GREEDY)
    got = client.chat.completions.create(model=MODEL_NAME, messages=messages, **GREEDY)
    assert got.choices[0].message.content == expected.choices[0].message.content


def test_logprobs_agree_within_fp32_rounding(client: openai.OpenAI, reference: openai.OpenAI) -> None:
    kwargs = {**GREEDY, "logprobs": 1}
    expected = reference.completions.create(model=MODEL_NAME, prompt=PROMPTS[-1], **kwargs).choices[0].logprobs
    got = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[-1], **kwargs).choices[0].logprobs
    assert got.tokens == expected.tokens
    assert got.token_logprobs == pytest.approx(expected.token_logprobs, abs=1e-3)
