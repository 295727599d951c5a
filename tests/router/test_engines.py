"""The router in front of real ``paged-engine serve`` processes (tiny random Gemma 3, real tokenizer), driven
with the official ``openai`` and ``anthropic`` clients: streaming pass-through, the Messages API and the
tokenizer routes, a replica draining through its admin API, an engine killed mid-stream, and a client
disconnect aborting the engine's request."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.router.conftest import Proc, replica_states, start_router, wait_until
from tests.server.conftest import (
    ADMIN_TOKEN,
    API_KEY,
    COMMON_ARGS,
    MODEL_NAME,
    ServerProcess,
    scrape,
    start_server,
)  # fmt: skip

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.gemma]
ENGINE_ARGS = (*COMMON_ARGS, "--api-key", API_KEY, "--admin-token", ADMIN_TOKEN, "--max-num-seqs", "8")


@pytest.fixture(scope="module")
def engines(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    log_dir = tmp_path_factory.mktemp("engines")
    started = [start_server(tiny_gemma_dir, log_dir, *ENGINE_ARGS) for _ in range(2)]
    yield started
    for engine in started:
        engine.stop()


@pytest.fixture
def routed(engines: list[ServerProcess], tmp_path: Path) -> Iterator[Proc]:
    proc = start_router(tmp_path, [e.url for e in engines], "--policy", "round_robin")
    wait_until(lambda: all(r["ready"] for r in replica_states(proc).values()))
    yield proc
    proc.stop()


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def finished(engine: ServerProcess) -> float:
    return sum(v for k, v in scrape(engine).items() if k.startswith("paged_request_success_total{"))


def test_streams_through_the_router_equal_the_engines_own(engines: list[ServerProcess], routed: Proc) -> None:
    direct, via = openai_client(engines[0].url), openai_client(routed.url)
    kwargs = {"model": MODEL_NAME, "max_tokens": 12, "temperature": 0.0}
    expected = direct.completions.create(prompt="The router relays", **kwargs).choices[0].text
    for _ in range(2):  # round robin: both replicas, same greedy output
        chunks = list(via.completions.create(prompt="The router relays", stream=True, **kwargs))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == expected
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    want = direct.chat.completions.create(messages=messages, **kwargs).choices[0].message.content
    stream = via.chat.completions.create(messages=messages, stream=True, **kwargs)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want
    assert [m.id for m in via.models.list().data] == [MODEL_NAME]


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_messages_and_tokenizer_routes_through_the_router_equal_the_engines_own(
    engines: list[ServerProcess], routed: Proc
) -> None:
    kwargs = {"model": MODEL_NAME, "max_tokens": 8, "system": "Be brief.", "extra_body": {"temperature": 0},
              "messages": [{"role": "user", "content": "Hello"}]}  # fmt: skip
    with (
        anthropic.Anthropic(base_url=engines[0].url, api_key=API_KEY, max_retries=0, timeout=60) as direct,
        anthropic.Anthropic(base_url=routed.url, api_key=API_KEY, max_retries=0, timeout=60) as via,
    ):
        want = text_of(direct.messages.create(**kwargs))
        assert text_of(via.messages.create(**kwargs)) == want
        with via.messages.stream(**kwargs) as stream:
            assert stream.get_final_text() == want
    auth = {"Authorization": f"Bearer {API_KEY}"}
    for path, body in (
        ("/tokenize", {"model": MODEL_NAME, "prompt": "Hello there"}),
        ("/tokenize", {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True}),
        ("/detokenize", {"tokens": [2, 9259, 1032]}),
    ):
        own = httpx.post(f"{engines[0].url}{path}", json=body, headers=auth, timeout=30)
        relayed = httpx.post(f"{routed.url}{path}", json=body, headers=auth, timeout=30)
        assert (relayed.status_code, relayed.json()) == (200, own.json()), path


def test_a_wrong_api_key_is_the_engines_401(routed: Proc) -> None:
    client = openai.OpenAI(base_url=f"{routed.url}/v1", api_key="wrong", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1)


def test_a_draining_engine_gets_no_new_requests(engines: list[ServerProcess], routed: Proc) -> None:
    drained, other = engines
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert httpx.post(f"{drained.url}/admin/drain", headers=auth, timeout=30).status_code == 200
    try:
        wait_until(lambda: not replica_states(routed)[drained.url]["ready"])
        before_drained, before_other = finished(drained), finished(other)
        client = openai_client(routed.url)
        for _ in range(4):
            client.completions.create(model=MODEL_NAME, prompt="Where do I go?", max_tokens=2)
        assert finished(drained) == before_drained
        assert finished(other) == before_other + 4
    finally:
        httpx.delete(f"{drained.url}/admin/drain", headers=auth, timeout=30)
    wait_until(lambda: replica_states(routed)[drained.url]["ready"])


def test_a_client_leaving_mid_stream_aborts_the_engines_request(engines: list[ServerProcess], routed: Proc) -> None:
    body = {"model": MODEL_NAME, "prompt": "Go on and on.", "max_tokens": 400, "ignore_eos": True, "stream": True}
    aborted = {e.url: scrape(e).get("paged_request_success_total{finished_reason=abort}", 0.0) for e in engines}
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream("POST", f"{routed.url}/v1/completions", json=body, headers=auth, timeout=60) as response:
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)
    # The router closes its upstream stream; the engine aborts the request and frees its blocks.
    wait_until(
        lambda: (
            sum(scrape(e).get("paged_request_success_total{finished_reason=abort}", 0.0) for e in engines)
            == sum(aborted.values()) + 1
        ),
        timeout=30,
    )
    wait_until(lambda: all(scrape(e)["paged_kv_cache_usage_ratio"] == 0.0 for e in engines), timeout=30)


def test_an_engine_killed_mid_stream_errors_that_stream_and_the_rest_go_on(
    engines: list[ServerProcess], tiny_gemma_dir: Path, tmp_path: Path
) -> None:
    doomed = start_server(tiny_gemma_dir, tmp_path, *ENGINE_ARGS)
    router = start_router(tmp_path, [doomed.url, engines[0].url], "--policy", "round_robin")
    try:
        wait_until(lambda: all(r["ready"] for r in replica_states(router).values()))
        client = openai_client(router.url)
        kwargs = {"model": MODEL_NAME, "max_tokens": 400, "extra_body": {"ignore_eos": True}}
        streams = [client.completions.create(prompt="Keep talking.", stream=True, **kwargs) for _ in range(2)]
        for stream in streams:
            next(iter(stream))  # both streams have started: one on each engine
        core = doomed.core_pid()
        os.kill(doomed.process.pid, signal.SIGKILL)
        os.kill(core, signal.SIGKILL)
        outcomes = []
        for stream in streams:
            try:
                for _ in stream:
                    pass
                outcomes.append("complete")
            except openai.APIError as exc:
                outcomes.append(f"error: {exc.message}")
        assert sorted(o.split(":")[0] for o in outcomes) == ["complete", "error"]
        assert any("failed mid-stream" in o for o in outcomes)
        for _ in range(3):
            assert client.completions.create(model=MODEL_NAME, prompt="Still there?", max_tokens=2).choices
        assert replica_states(router)[doomed.url]["ready"] is False
    finally:
        router.stop()
        doomed.stop()
