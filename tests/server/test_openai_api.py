"""The OpenAI-compatible API against a real server process, driven by the official `openai` client."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.conftest import API_KEY, MODEL_NAME, ServerProcess, admin, auto_attention, engine_info, scrape

pytestmark = [pytest.mark.server, pytest.mark.gemma]

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time,"


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_completion_and_chat(client: openai.OpenAI) -> None:
    completion = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0)
    choice = completion.choices[0]
    assert choice.text and choice.finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 5 and completion.usage.completion_tokens <= 8

    chat = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hello there!"}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens


def test_streaming_equals_non_streaming_under_greedy(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kwargs).choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs) if c.choices)
    assert streamed == full

    messages = [{"role": "user", "content": "Tell me a story about a cat."}]
    chat_kwargs = dict(model=MODEL_NAME, messages=messages, max_tokens=24, temperature=0)
    full_chat = client.chat.completions.create(**chat_kwargs).choices[0].message.content
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(stream=True, **chat_kwargs)
        if c.choices
    ]
    assert "".join(pieces) == full_chat


def test_n_choices_have_indices_and_finish_once(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=6, n=3, temperature=1.0, seed=7, stream=True
    )
    finishes: dict[int, int] = {}
    for chunk in stream:
        for choice in chunk.choices:
            assert choice.index in (0, 1, 2)
            if choice.finish_reason is not None:
                finishes[choice.index] = finishes.get(choice.index, 0) + 1
    assert finishes == {0: 1, 1: 1, 2: 1}

    completion = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, n=3, seed=3)
    assert sorted(c.index for c in completion.choices) == [0, 1, 2]
    assert all(c.finish_reason for c in completion.choices)


def test_length_finish_reports_max_tokens(client: openai.OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=11, temperature=0, extra_body={"ignore_eos": True}
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 11


def test_include_usage_only_in_the_last_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Count to five."}], max_tokens=5,
            stream=True, stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert 0 < last.usage.completion_tokens <= 5


def test_stop_string_ends_and_is_not_emitted(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL_NAME, prompt=PROMPT, temperature=0, extra_body={"ignore_eos": True})
    free = client.completions.create(max_tokens=32, **kwargs).choices[0].text
    stop = free[len(free) // 2 : len(free) // 2 + 3]
    assert stop.strip(), f"need a non-blank stop string from {free!r}"
    expected = free[: free.index(stop)]
    for stream in (False, True):
        if stream:
            chunks = list(client.completions.create(max_tokens=32, stop=[stop], stream=True, **kwargs))
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            reason = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
        else:
            choice = client.completions.create(max_tokens=32, stop=[stop], **kwargs).choices[0]
            text, reason = choice.text, choice.finish_reason
        assert text == expected
        assert reason == "stop"


def test_logprobs(client: openai.OpenAI) -> None:
    completion = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
    lp = completion.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value <= 0.0
        assert len(top) <= 3 and max(top.values()) == pytest.approx(value, abs=1e-4)  # greedy: the top one
        assert token in top

    chat = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0,
        logprobs=True, top_logprobs=2,
    )  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert all(len(item.top_logprobs) == 2 and item.logprob <= 0 for item in content)


def test_echo_with_prompt_logprobs(client: openai.OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=1
    )
    choice = completion.choices[0]
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    assert lp.token_logprobs[0] is None  # the first prompt token has no logprob
    assert len(lp.tokens) == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert lp.tokens[0] == "<bos>" and lp.text_offset[0] == lp.text_offset[1] == 0  # listed, not in the text
    for token, offset in zip(lp.tokens[1:], lp.text_offset[1:], strict=True):  # offsets index the echoed text
        assert choice.text[offset : offset + len(token)] == token


def test_echo_logprobs_of_a_chunked_prompt_reach_every_choice(client: openai.OpenAI, server: ServerProcess) -> None:
    """A prompt prefilled over several steps, sampled n = 2 times: each choice echoes every prompt token's logprob."""
    prompt = "Every prompt token gets a logprob, however the prefill is split. " * 16
    with admin(server) as a:
        before = a.get("/admin/budgets").json()
        assert a.put("/admin/budgets", json={"max_num_batched_tokens": 64}).status_code == 200
        try:
            completion = client.completions.create(
                model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=1.0, seed=3, echo=True, logprobs=1, n=2
            )
        finally:
            a.put("/admin/budgets", json={k: before[k] for k in ("max_num_seqs", "max_num_batched_tokens")})
    n_prompt = completion.usage.prompt_tokens
    assert n_prompt > 3 * 64
    echoed = []
    for choice in completion.choices:
        lp = choice.logprobs
        assert len(lp.tokens) == n_prompt + 2 and choice.text.startswith(prompt)
        assert lp.token_logprobs[0] is None and all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
        echoed.append(lp.token_logprobs[:n_prompt])
    assert echoed[0] == echoed[1]  # the prompt is computed once and shared


def test_streamed_echo_starts_each_choice_with_the_prompt_and_its_logprobs(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=3, temperature=1.0, seed=5, echo=True, logprobs=1, n=2,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    texts: dict[int, str] = {0: "", 1: ""}
    token_logprobs: dict[int, list[float | None]] = {0: [], 1: []}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if not texts[choice.index]:  # the first chunk of a choice carries the whole prompt
                assert choice.text.startswith(PROMPT)
            texts[choice.index] += choice.text
            token_logprobs[choice.index] += choice.logprobs.token_logprobs if choice.logprobs else []
    assert usage is not None
    for index in (0, 1):
        assert texts[index].startswith(PROMPT)
        assert len(token_logprobs[index]) == usage.prompt_tokens + 3 and token_logprobs[index][0] is None
    assert token_logprobs[0][: usage.prompt_tokens] == token_logprobs[1][: usage.prompt_tokens]


def test_repeated_prompt_reports_cached_tokens(client: openai.OpenAI, server: ServerProcess) -> None:
    prompt = "A unique prompt for the prefix cache test. " * 8
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    n = first.usage.prompt_tokens
    assert n > 32
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    before = scrape(server)
    second = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    expected = (n - 1) // 16 * 16
    assert second.usage.prompt_tokens_details.cached_tokens == expected
    after = scrape(server)
    assert after["paged_prefix_cache_hits_total"] - before["paged_prefix_cache_hits_total"] == expected
    assert after["paged_prefix_cache_queries_total"] - before["paged_prefix_cache_queries_total"] == n


def test_engine_info_says_what_serves_and_which_cpu_kernel_variants(server: ServerProcess) -> None:
    from paged_engine.kernels import ops
    from paged_engine.kernels.cpu_features import CPU_KERNEL_FAMILIES
    from paged_engine.kernels.cpu_isa import bf16_gemm_unit, describe_isas

    labels = engine_info(server)
    assert labels["dtype"] == "float32" and labels["device"] == "cpu"
    chosen = auto_attention()  # what the engine's rule picks on this machine (our CPU kernels on CI)
    assert (labels["attention_backend"], labels["attention_fallback"]) == (chosen.backend, chosen.reason or ""), labels
    ops.load()
    supported = ops.supported_cpu_isas()  # each family its own choice, within what this CPU runs
    families = {family: labels[f"cpu_isa_{family}"] for family in CPU_KERNEL_FAMILIES}
    assert set(families.values()) <= set(supported), labels
    assert f"CPU kernels: {describe_isas(families)}" in server.log()
    assert labels["cpu_bf16_gemm"] == bf16_gemm_unit(), labels  # what oneDNN runs: test_bf16_gemm_unit.py


def test_tokenize_and_detokenize(server: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    tokens = httpx.post(f"{server.url}/tokenize", json={"prompt": "Hello world"}, headers=headers).json()
    assert tokens["count"] == len(tokens["tokens"]) > 1
    text = httpx.post(f"{server.url}/detokenize", json={"tokens": tokens["tokens"][1:]}, headers=headers).json()
    assert text["prompt"] == "Hello world"
