"""What the router serves besides completions, against fake replicas: LoRA adapter names routed to the replicas
that serve them, the models a ModelDeployment declares held while no replica runs (others a 404 at once), and
Anthropic's Messages API and the tokenizer routes relayed like completions."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.router.conftest import FAKE_MODEL, control, replica_states, seen, start_fake, wait_until
from tests.router.test_proxy import _in_background, complete, text_of
from tests.server.conftest import free_port


def ask(router, model: str, timeout: float = 30) -> httpx.Response:  # type: ignore[no-untyped-def]
    body = {"model": model, "prompt": "hello", "max_tokens": 2}
    return httpx.post(f"{router.url}/v1/completions", json=body, timeout=timeout)


def test_an_adapter_is_routed_to_the_replicas_serving_it_and_an_unknown_model_is_a_404(fakes, router):
    a, b = fakes(2)
    control(a, adapters=["sql-lora"])
    r = router([a.url, b.url], "--policy", "round_robin")
    wait_until(lambda: "sql-lora" in replica_states(r)[a.url]["models"])
    assert {text_of(ask(r, "sql-lora")) for _ in range(6)} == {"a"}
    assert [body["model"] for body in seen(a)["bodies"]] == ["sql-lora"] * 6
    assert {text_of(ask(r, FAKE_MODEL)) for _ in range(4)} == {"a", "b"}  # the base model: both replicas
    unknown = ask(r, "nope")
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert error["param"] == "model"
    assert "'nope' does not exist" in error["message"] and "fake-model, sql-lora" in error["message"]
    # An adapter unloaded from the replica is no longer routed there.
    control(a, adapters=[])
    wait_until(lambda: ask(r, "sql-lora").status_code == 404)


def test_at_zero_replicas_a_declared_model_waits_and_an_undeclared_one_is_a_404_at_once(procs, tmp_path, router):
    port = free_port()  # no replica listens here yet: the fleet is at zero
    declared = ("--served-model", FAKE_MODEL, "--served-model", "sql-lora")
    short = router([f"http://127.0.0.1:{port}"], *declared, "--queue-timeout", "1.5")
    undeclared = ask(short, "nope", timeout=5)
    assert undeclared.status_code == 404
    assert "fake-model, sql-lora" in undeclared.json()["error"]["message"]
    timed_out = ask(short, "sql-lora")
    assert timed_out.status_code == 503
    assert timed_out.headers["retry-after"] == "1"
    assert "within 1.5 s" in timed_out.json()["error"]["message"]

    patient = router([f"http://127.0.0.1:{port}"], *declared, "--queue-timeout", "60")
    held, result = _in_background(lambda: ask(patient, "sql-lora", timeout=60))
    wait_until(lambda: httpx.get(f"{patient.url}/router/replicas").json()["queued"].get("sql-lora") == 1)
    replica = start_fake(tmp_path, "late", port)  # a replica comes up, then loads the adapter
    procs.append(replica)
    control(replica, adapters=["sql-lora"])
    held.join(30)
    assert result["value"].status_code == 200
    assert text_of(result["value"]) == "late"


def test_anthropic_messages_are_relayed_plain_and_streamed_with_anthropic_errors(fakes, router):
    (a,) = fakes(1)
    control(a, adapters=["sql-lora"])
    r = router([a.url])
    wait_until(lambda: "sql-lora" in replica_states(r)[a.url]["models"])
    with anthropic.Anthropic(base_url=r.url, api_key="k", max_retries=0, timeout=30) as claude:
        kwargs = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "system": "Be brief."}
        message = claude.messages.create(model="sql-lora", **kwargs)
        assert (message.content[0].text, message.model) == ("a", "sql-lora")
        with claude.messages.stream(model=FAKE_MODEL, **kwargs) as stream:
            assert stream.get_final_text() == "a"
        with pytest.raises(anthropic.NotFoundError, match="'nope' does not exist"):
            claude.messages.create(model="nope", **kwargs)
    assert seen(a)["authorization"] == "Bearer k" and seen(a)["bodies"][-1]["system"] == "Be brief."
    assert seen(a)["requests"] == 2


def test_an_anthropic_stream_cut_mid_way_ends_with_an_anthropic_error_event(fakes, router):
    a, b = fakes(2)
    control(a, die_after_chunks=2, chunk_delay=0.05)
    control(b, die_after_chunks=2, chunk_delay=0.05)
    r = router([a.url, b.url])
    hi = [{"role": "user", "content": "hi"}]
    with (
        anthropic.Anthropic(base_url=r.url, api_key="k", max_retries=0, timeout=30) as claude,
        pytest.raises(anthropic.APIStatusError, match="failed mid-stream"),
        claude.messages.stream(model=FAKE_MODEL, max_tokens=8, messages=hi) as stream,
    ):
        stream.get_final_text()


def test_the_tokenizer_routes_are_relayed_with_or_without_a_model(fakes, router):
    (a,) = fakes(1)
    r = router([a.url])
    for body in ({"model": FAKE_MODEL, "prompt": "hi"}, {"prompt": "hi"}):
        answer = httpx.post(f"{r.url}/tokenize", json=body, timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json()["tokens"] == [ord("h"), ord("i")]
    assert seen(a)["bodies"][-1] == {"prompt": "hi"}  # no model given: the engine's base model, body unchanged
    answer = httpx.post(f"{r.url}/detokenize", json={"tokens": [ord("o"), ord("k")]}, timeout=10)
    assert answer.json() == {"prompt": "ok"}
    unknown = httpx.post(f"{r.url}/detokenize", json={"model": "nope", "tokens": [1]}, timeout=10)
    assert unknown.status_code == 404 and "'nope' does not exist" in unknown.json()["error"]["message"]
    assert complete(r).status_code == 200
