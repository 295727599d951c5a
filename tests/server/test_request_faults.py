"""No request a client can send stops the engine core.

Every field that names a token id or depends on the model is refused at the edge with a 400 naming it (the
out-of-vocabulary ``stop_token_ids`` used to end the engine-core process); the served OpenAPI schema states those
limits; and a request whose own work fails inside a step fails alone while the rest of its batch completes.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.conftest import (
    API_KEY,
    COMMON_ARGS,
    MODEL_NAME,
    ServerProcess,
    scrape,
    start_server,
    wait_for,
)
from tests.server.fault_injection.sitecustomize import PREPARE_SEED, SAMPLE_SEED

pytestmark = [pytest.mark.server, pytest.mark.gemma]

VOCAB = 262144  # the tiny model's (Gemma 3's) vocabulary
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHAT = [{"role": "user", "content": "hello"}]

OUT_OF_VOCABULARY = [
    ("/v1/completions", {"prompt": "hi", "stop_token_ids": [VOCAB]}, "stop_token_ids"),
    ("/v1/completions", {"prompt": "hi", "stop_token_ids": [1, 2**40]}, "stop_token_ids"),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {str(VOCAB + 7): 5}}, "logit_bias"),
    ("/v1/completions", {"prompt": "hi", "allowed_token_ids": [5, VOCAB]}, "allowed_token_ids"),
    ("/v1/completions", {"prompt": [5, VOCAB]}, "prompt"),
    ("/v1/completions", {"prompt": [[5], [6, 2**70]]}, "prompt"),
    ("/v1/chat/completions", {"messages": CHAT, "stop_token_ids": [VOCAB]}, "stop_token_ids"),
    ("/v1/chat/completions", {"messages": CHAT, "logit_bias": {str(VOCAB): 1}}, "logit_bias"),
    ("/v1/chat/completions", {"messages": CHAT, "allowed_token_ids": [2**33]}, "allowed_token_ids"),
    ("/detokenize", {"tokens": [1, VOCAB]}, "tokens"),
]
MODEL_LIMITS = [
    ("/v1/completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "echo": True, "logprobs": 21, "max_tokens": 1}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1024}, "max_tokens"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 5000}, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "hi", "seed": 2**53}, "seed"),
    ("/v1/completions", {"prompt": "hi", "priority": -(2**63)}, "priority"),
]


@pytest.fixture(scope="module")
def server(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny model, with faults injected into requests carrying the marked seeds."""
    proc = start_server(
        tiny_gemma_dir, tmp_path_factory.mktemp("logs"), *COMMON_ARGS, "--api-key", API_KEY,
        env={"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent / "fault_injection"),
                                                          os.environ.get("PYTHONPATH")]))},
    )  # fmt: skip
    yield proc
    proc.stop()


def completion(server: ServerProcess, **body) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", **body}, headers=AUTH, timeout=60)


def assert_still_serving(server: ServerProcess, core_pid: int) -> None:
    assert server.process.poll() is None and server.core_pid() == core_pid
    assert httpx.get(f"{server.url}/health").status_code == 200
    ok = completion(server, max_tokens=3, temperature=0)
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_the_request_that_killed_the_engine_core_is_a_400(server: ServerProcess) -> None:
    core = server.core_pid()
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as info,
    ):
        client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=4, extra_body={"stop_token_ids": [VOCAB]})
    assert info.value.body["param"] == "stop_token_ids"
    assert f"token id {VOCAB}, outside the vocabulary [0, {VOCAB})" in info.value.body["message"]
    assert_still_serving(server, core)


@pytest.mark.parametrize(("path", "body", "param"), OUT_OF_VOCABULARY + MODEL_LIMITS)
def test_every_model_dependent_field_is_checked_at_the_edge(server: ServerProcess, path, body, param) -> None:
    core = server.core_pid()
    response = httpx.post(f"{server.url}{path}", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert_still_serving(server, core)


def test_the_schema_states_the_enforced_limits(server: ServerProcess) -> None:
    schemas = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]
    completion_schema, chat = schemas["CompletionRequest"], schemas["ChatCompletionRequest"]
    props = completion_schema["properties"]

    def integers(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            if node.get("type") == "integer":
                yield node
            for value in node.values():
                yield from integers(value)
        elif isinstance(node, list):
            for value in node:
                yield from integers(value)

    for field in ("prompt", "stop_token_ids", "allowed_token_ids"):
        assert {(n.get("minimum"), n.get("maximum")) for n in integers(props[field])} == {(0, VOCAB - 1)}, field
    assert [n["maximum"] for n in integers(props["max_tokens"])] == [1023]
    assert [n["maximum"] for n in integers(props["logprobs"])] == [20]
    assert [n["maximum"] for n in integers(chat["properties"]["top_logprobs"])] == [20]
    assert props["n"]["maximum"] == 128 and props["temperature"]["anyOf"][0]["maximum"] == 2.0
    assert props["logit_bias"]["anyOf"][0]["additionalProperties"] is False
    assert chat["dependentSchemas"]["top_logprobs"]["properties"]["logprobs"] == {"const": True}
    assert completion_schema["dependentSchemas"]["stream_options"]["properties"]["stream"] == {"const": True}
    assert props["model"]["anyOf"][0]["enum"] == [MODEL_NAME]
    assert "oneOf" in schemas["TokenizeRequest"]


def _stream_until_first_token(server: ServerProcess, started: threading.Event, results: dict, key: str) -> None:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120) as client:
        stream = client.completions.create(
            model=MODEL_NAME,
            prompt=f"Count with me, {key}:",
            max_tokens=24,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        text = ""
        for chunk in stream:
            text += chunk.choices[0].text
            started.set()
        results[key] = text


@pytest.mark.parametrize("seed", [PREPARE_SEED, SAMPLE_SEED], ids=["while-preparing", "while-sampling"])
def test_a_request_failing_inside_a_step_fails_alone(server: ServerProcess, seed: int) -> None:
    core = server.core_pid()
    expected: dict[str, str] = {}
    for key in ("a", "b"):  # what each healthy request generates alone
        _stream_until_first_token(server, threading.Event(), expected, key)
    before = scrape(server).get("paged_request_success_total{finished_reason=error}", 0.0)

    results: dict[str, str] = {}
    events = {key: threading.Event() for key in ("a", "b")}
    threads = [threading.Thread(target=_stream_until_first_token, args=(server, events[k], results, k)) for k in events]
    for thread in threads:
        thread.start()
    for event in events.values():
        assert event.wait(60)  # both are running when the faulty one joins their batch
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0) as client,
        pytest.raises(openai.InternalServerError) as info,
    ):
        client.completions.create(model=MODEL_NAME, prompt="faulty", max_tokens=8, temperature=0, seed=seed)
    assert info.value.status_code == 500 and "injected fault" in info.value.body["message"]
    for thread in threads:
        thread.join(120)
    assert results == expected  # the rest of the batch is served exactly as if alone

    # A streamed faulty request ends with an error event, not a dropped connection.
    with httpx.stream("POST", f"{server.url}/v1/completions", headers=AUTH, timeout=60,
                      json={"prompt": "faulty", "max_tokens": 8, "seed": seed, "stream": True}) as stream:  # fmt: skip
        events_text = "".join(stream.iter_text())
    assert '"internal_server_error"' in events_text and events_text.rstrip().endswith("data: [DONE]")

    assert_still_serving(server, core)
    metrics = wait_for(lambda: (m := scrape(server)) and m["paged_kv_cache_usage_ratio"] == 0.0 and m)
    assert metrics["paged_request_success_total{finished_reason=error}"] == before + 2


def _core_input_address(core_pid: int) -> str:
    """The ipc:// address the engine core's input socket is bound to (matched through the socket's inode)."""
    inodes = {
        os.readlink(f"/proc/{core_pid}/fd/{fd}").removeprefix("socket:[").removesuffix("]")
        for fd in os.listdir(f"/proc/{core_pid}/fd")
        if os.readlink(f"/proc/{core_pid}/fd/{fd}").startswith("socket:[")
    }
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and re.search(r"/input-\d+$", fields[7]):  # input-RANK
            return f"ipc://{fields[7]}"
    raise AssertionError(f"no ipc input socket among the core's sockets {sorted(inodes)}")


def test_malformed_frames_reaching_the_core_are_dropped(server: ServerProcess) -> None:
    import msgspec
    import zmq

    core = server.core_pid()
    address = _core_input_address(core)  # before any socket: a context left open would hang the run at exit
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(address)
    try:
        for frame in (
            b"\x00not msgpack at all",
            msgspec.msgpack.encode(["add", "x", "not a token list"]),  # the right tag, the wrong shape
            msgspec.msgpack.encode(["add", "y", [1, 2], {"n": -5}, 0.0]),  # sampling params that don't validate
            b"\xc1" * (8 << 20),  # 8 MiB of an invalid msgpack byte
        ):
            sock.send(frame)
    finally:
        sock.close(linger=5000)
        ctx.term()
    wait_for(lambda: server.log().count("dropping a malformed message") >= 4, timeout=60)
    assert_still_serving(server, core)
