"""Client mistakes get the right status and OpenAI's error envelope, and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.conftest import API_KEY, MODEL_NAME, ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.gemma]

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _assert_envelope(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error


BAD_COMPLETIONS = [
    ({"prompt": "hi", "temperature": -0.5}, "temperature"),
    ({"prompt": "hi", "n": 0}, "n"),
    ({"prompt": "hi", "logprobs": 21}, "logprobs"),
    ({"prompt": "hi", "stream_options": {"include_usage": True}}, None),
    ({"prompt": "hi", "max_tokens": 5000}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "many"}, "max_tokens"),
    ({"prompt": "hi", "top_p": 0}, "top_p"),
    ({"prompt": "hi", "top_k": -2}, "top_k"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [999999999]}, "prompt"),
    ({"prompt": "hi", "temprature": 0.5}, "temprature"),
    ({"prompt": "hi", "stop": [""]}, None),
]


@pytest.mark.parametrize(("body", "param"), BAD_COMPLETIONS, ids=[str(b) for b, _ in BAD_COMPLETIONS])
def test_bad_completion_parameters_are_400(server: ServerProcess, body: dict, param: str | None) -> None:
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=30)
    _assert_envelope(response, 400, param)


def test_prompt_longer_than_context_is_400_naming_the_limit(server: ServerProcess) -> None:
    response = httpx.post(f"{server.url}/v1/completions", json={"prompt": list(range(5, 1105))}, headers=AUTH)
    error = _assert_envelope(response, 400, "prompt")
    assert "1100" in error["message"] and "1024" in error["message"]


def test_malformed_json_is_400(server: ServerProcess) -> None:
    response = httpx.post(
        f"{server.url}/v1/chat/completions", content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    _assert_envelope(response, 400)


def test_bad_chat_parameters_are_400(server: ServerProcess) -> None:
    for body, param in [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, None),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, None),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, "max_completion_tokens"),
    ]:
        _assert_envelope(httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=AUTH), 400, param)


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=2)
    assert info.value.status_code == 404
    assert info.value.body["param"] == "model"


def test_missing_or_wrong_api_key_is_401(server: ServerProcess) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi"}, headers=headers)
        _assert_envelope(response, 401)
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0) as bad,
        pytest.raises(openai.AuthenticationError),
    ):
        bad.models.list()


def test_openai_client_sees_400_and_next_request_succeeds(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_NAME, prompt="hi", temperature=-1)
    assert info.value.body["param"] == "temperature"
    ok = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=3)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_admin_api_needs_the_admin_token(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/admin/budgets").status_code == 401
    assert httpx.get(f"{server.url}/admin/budgets", headers=AUTH).status_code == 401  # the API key is not enough


def test_a_body_over_the_size_limit_is_413_before_parsing(server: ServerProcess, client: openai.OpenAI) -> None:
    limit = 32 << 20  # the default --max-request-body-bytes
    url = f"{server.url}/v1/completions"
    headers = {**AUTH, "content-type": "application/json"}
    declared = httpx.post(url, content=b" " * (limit + 1), headers=headers, timeout=60)
    error = _assert_envelope(declared, 413)
    assert str(limit) in error["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(33):
            yield b" " * (1 << 20)

    _assert_envelope(httpx.post(url, content=chunks(), headers=headers, timeout=60), 413)
    ok = client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2)
    assert ok.choices[0].finish_reason in ("stop", "length")
