"""Synthetic datasets: lengths, sharing, determinism, bad input; exact lengths with the real Gemma tokenizer."""

from __future__ import annotations

import statistics

import pytest
from paged_platform.bench.datasets import (
    DatasetError,
    random_dataset,
    shared_prefix_dataset,
    sharegpt_lengths,
    sharegpt_like_dataset,
)


def test_random_lengths_within_range_and_deterministic() -> None:
    data = random_dataset(200, input_len=100, output_len=50, range_ratio=0.2, seed=1)
    assert all(80 <= r.prompt_tokens <= 120 and 40 <= r.output_tokens <= 60 for r in data)
    assert all(len(r.prompt.split()) == r.prompt_tokens for r in data)  # one word per token without tokenizer
    assert len({r.prompt for r in data}) == 200
    assert data == random_dataset(200, input_len=100, output_len=50, range_ratio=0.2, seed=1)
    assert data != random_dataset(200, input_len=100, output_len=50, range_ratio=0.2, seed=2)
    fixed = random_dataset(5, input_len=7, output_len=3)
    assert {(r.prompt_tokens, r.output_tokens) for r in fixed} == {(7, 3)}


def test_shared_prefix_round_robin() -> None:
    data = shared_prefix_dataset(9, num_prefixes=3, prefix_len=20, suffix_len=5, output_len=8, seed=0)
    prefixes = [r.prompt.split("\n\n")[0] for r in data]
    assert prefixes[:3] == prefixes[3:6] == prefixes[6:]
    assert len(set(prefixes)) == 3
    assert len({r.prompt for r in data}) == 9  # questions differ
    assert all(r.prompt_tokens == 25 and r.output_tokens == 8 for r in data)


def test_sharegpt_like_follows_bundled_distribution() -> None:
    inputs, outputs = sharegpt_lengths()
    assert len(inputs) == len(outputs) == 100
    data = sharegpt_like_dataset(2000, seed=0)
    assert statistics.fmean(r.prompt_tokens for r in data) == pytest.approx(statistics.fmean(inputs), rel=0.1)
    assert statistics.fmean(r.output_tokens for r in data) == pytest.approx(statistics.fmean(outputs), rel=0.1)
    clipped = sharegpt_like_dataset(300, max_input_len=64, max_output_len=32, seed=0)
    assert max(r.prompt_tokens for r in clipped) == 64 and max(r.output_tokens for r in clipped) == 32


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: random_dataset(0, 10, 10), "number of requests must be >= 1, got 0"),
        (lambda: random_dataset(1, 0, 10), "input length must be >= 1, got 0"),
        (lambda: random_dataset(1, 10, 10, range_ratio=1.0), r"range ratio must be within \[0, 1\), got 1.0"),
        (lambda: shared_prefix_dataset(2, 3, 4, 4, 4), r"number of prefixes \(3\) must be <= number of requests \(2\)"),
        (lambda: shared_prefix_dataset(2, 1, 0, 4, 4), "prefix length must be >= 1, got 0"),
        (lambda: sharegpt_like_dataset(2, max_output_len=0), "max output length must be >= 1, got 0"),
    ],
)
def test_bad_parameters(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DatasetError, match=message):
        build()


@pytest.mark.gemma
def test_exact_lengths_with_the_gemma_tokenizer() -> None:
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer import load_tokenizer
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    tokenizer = load_tokenizer(resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder))
    data = random_dataset(20, input_len=64, output_len=4, range_ratio=0.5, tokenizer=tokenizer, seed=0)
    for r in data:
        assert r.prompt_tokens == len(tokenizer.encode(r.prompt, add_special_tokens=False))
        assert 32 - 2 <= r.prompt_tokens <= 96  # a re-encoded cut may lose a token or two at the boundary
    shared = shared_prefix_dataset(4, 2, prefix_len=48, suffix_len=8, output_len=4, tokenizer=tokenizer)
    first, third = (tokenizer.encode(shared[i].prompt, add_special_tokens=False) for i in (0, 2))
    assert first[:40] == third[:40]  # same system prompt: the same leading tokens (prefix-cache hits)
