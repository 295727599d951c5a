"""LoRA adapters over HTTP: model names in ``/v1/models`` and requests, per-adapter metrics, and the admin API
that loads and unloads them at run time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.model.lora_adapters import save_random_adapter
from tests.server.conftest import (
    ADMIN_TOKEN,
    API_KEY,
    COMMON_ARGS,
    MODEL_NAME,
    ServerProcess,
    admin,
    scrape,
    start_server,
)

pytestmark = [pytest.mark.server, pytest.mark.gemma]
PROMPT = [2, 1000, 2000, 3000, 4000, 5000, 6000, 7000]


@pytest.fixture(scope="module")
def adapters(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "one": save_random_adapter(tiny_gemma_dir, root / "one", rank=4, alpha=8, seed=1),
        "two": save_random_adapter(tiny_gemma_dir, root / "two", rank=8, alpha=8, seed=2, targets=["v_proj"]),
        "wide": save_random_adapter(tiny_gemma_dir, root / "wide", rank=16, alpha=16, seed=3, targets=["q_proj"]),
    }


@pytest.fixture(scope="module")
def server(tiny_gemma_dir: Path, adapters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tiny_gemma_dir, tmp_path_factory.mktemp("logs"), *COMMON_ARGS, "--api-key", API_KEY,
        "--admin-token", ADMIN_TOKEN, "--lora-modules", f"one={adapters['one']}", "--max-loras", "2",
        "--max-lora-rank", "8", timeout=300.0,
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def expected(tiny_gemma_dir: Path, adapters) -> dict[str | None, str]:
    """What the offline engine generates for PROMPT under each adapter (itself tested against PEFT)."""
    from paged_engine import LLM, SamplingParams

    llm = LLM(str(tiny_gemma_dir), lora_modules=[f"one={adapters['one']}", f"two={adapters['two']}"],
              max_lora_rank=8, num_kv_blocks=64, max_model_len=256)  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    return {name: llm.generate([PROMPT], params, lora_name=name)[0].outputs[0].text for name in (None, "one", "two")}


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


def complete(client: openai.OpenAI, model: str) -> openai.types.Completion:
    return client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0.0,
                                     extra_body={"ignore_eos": True})  # fmt: skip


def test_adapters_are_models_with_the_base_as_parent(client: openai.OpenAI, adapters) -> None:
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {MODEL_NAME, "one"}
    assert models["one"].model_extra["parent"] == MODEL_NAME
    assert models["one"].model_extra["root"] == str(adapters["one"])


def test_model_name_selects_the_adapter(client: openai.OpenAI, server: ServerProcess, expected) -> None:
    assert expected["one"] != expected[None]
    before = scrape(server).get("paged_lora_requests_total{lora_name=one}", 0.0)
    base, one = complete(client, MODEL_NAME), complete(client, "one")
    assert (base.choices[0].text, base.model) == (expected[None], MODEL_NAME)
    assert (one.choices[0].text, one.model) == (expected["one"], "one")
    chat = client.chat.completions.create(model="one", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert chat.model == "one"
    stream = list(client.completions.create(model="one", prompt=PROMPT, max_tokens=8, temperature=0.0, stream=True,
                                            extra_body={"ignore_eos": True}))  # fmt: skip
    assert "".join(c.choices[0].text for c in stream if c.choices) == expected["one"]
    assert {c.model for c in stream} == {"one"}
    import anthropic

    with anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0) as claude:
        message = claude.messages.create(model="one", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert message.model == "one"
    assert scrape(server)["paged_lora_requests_total{lora_name=one}"] == before + 4


def test_unknown_model_is_a_404_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        complete(client, "nope")
    error = info.value.body
    assert "'nope' does not exist" in error["message"] and error["param"] == "model"
    assert "'one'" in error["message"]


def served(server: ServerProcess) -> set[str]:
    """The model names ``paged_served_model_info`` says the engine serves (what the router routes by)."""
    prefix = "paged_served_model_info{served_model_name="
    return {key[len(prefix) : -1] for key, value in scrape(server).items() if key.startswith(prefix) and value == 1}


def test_the_router_sends_an_adapters_name_to_the_engine_serving_it(
    server: ServerProcess, expected, tmp_path: Path
) -> None:
    from tests.router.conftest import replica_states, start_router, wait_until

    router = start_router(tmp_path, [server.url])
    try:
        wait_until(lambda: {MODEL_NAME, "one"} <= set(replica_states(router)[server.url]["models"]))
        with openai.OpenAI(base_url=f"{router.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as via:
            assert complete(via, "one").choices[0].text == expected["one"]
            with pytest.raises(openai.NotFoundError, match="'nope' does not exist; served: one, tiny-gemma"):
                complete(via, "nope")
    finally:
        router.stop()


def test_admin_loads_and_unloads_at_run_time(client: openai.OpenAI, server: ServerProcess, adapters, expected) -> None:
    with admin(server) as http:
        assert http.post("/admin/lora", json={"name": "two", "path": str(adapters["two"])},
                         headers={"Authorization": "Bearer wrong"}).status_code == 401  # fmt: skip
        loaded = http.post("/admin/lora", json={"name": "two", "path": str(adapters["two"])})
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["rank"] == 8
        assert complete(client, "two").choices[0].text == expected["two"]
        assert {m.id for m in client.models.list().data} == {MODEL_NAME, "one", "two"} == served(server)
        assert [x["name"] for x in http.get("/admin/lora").json()["loras"]] == ["one", "two"]

        refusals = [
            ({"name": "three", "path": str(adapters["one"])}, 409, "all 2 adapter slots are in use"),
            ({"name": "two", "path": str(adapters["two"])}, 409, "already loaded"),
            ({"name": MODEL_NAME, "path": str(adapters["two"])}, 409, "base model's name"),
            ({"name": "x", "path": "/no/such/folder"}, 400, "is not a folder"),
            ({"name": "x", "path": str(adapters["wide"])}, 400, "rank 16, above max_lora_rank=8"),
            ({"name": "x"}, 400, "path"),
        ]
        http.delete("/admin/lora/one").raise_for_status()  # a free slot, so the path and rank checks are reached
        for body, status, message in refusals[2:]:
            answer = http.post("/admin/lora", json=body)
            assert (answer.status_code, message in answer.text) == (status, True), answer.text
        http.post("/admin/lora", json={"name": "one", "path": str(adapters["one"])}).raise_for_status()
        for body, status, message in refusals[:2]:
            answer = http.post("/admin/lora", json=body)
            assert (answer.status_code, message in answer.text) == (status, True), answer.text

        missing = http.delete("/admin/lora/three")
        assert missing.status_code == 404 and "no adapter named 'three'" in missing.text
        assert http.delete("/admin/lora/two").json() == {"name": "two", "unloaded": True}
    assert {m.id for m in client.models.list().data} == {MODEL_NAME, "one"} == served(server)
    with pytest.raises(openai.NotFoundError):
        complete(client, "two")
    assert complete(client, "one").choices[0].text == expected["one"]
