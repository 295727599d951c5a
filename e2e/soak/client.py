"""One simulated client: sends a ``Case``, behaves as it says, and checks what came back.

The outcome is ``ok`` (served and well-formed), ``aborted`` (the client hung up on purpose), ``refused`` (an
invalid request refused as expected), or an unexpected error whose kind says what went wrong
(``http_503``, ``stream_error``, ``bad_answer``, ``transport:ReadTimeout``, ...).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from e2e.soak.workload import Behaviour, Case

EXPECTED = frozenset({"ok", "aborted", "refused"})
FINISH_REASONS = frozenset({"stop", "length"})


@dataclass(frozen=True)
class Outcome:
    kind: str
    label: str
    detail: str = ""

    @property
    def expected(self) -> bool:
        return self.kind in EXPECTED


class BadAnswer(Exception):
    """The server answered 200 with something a correct server would not send."""


class ErrorEvent(BadAnswer):
    """A stream ended with an error event instead of its answer."""


def check_choices(case: Case, texts: dict[int, str], finishes: dict[int, str | None]) -> None:
    """Every choice finished with a known reason, and no stop string survived in its text."""
    if sorted(finishes) != list(range(case.n)):
        raise BadAnswer(f"choices {sorted(finishes)} for n={case.n}")
    for index, reason in finishes.items():
        if reason not in FINISH_REASONS:
            raise BadAnswer(f"choice {index} finish_reason {reason!r}")
        if any(stop in texts.get(index, "") for stop in case.stops):
            raise BadAnswer(f"choice {index} text {texts[index]!r} holds a stop string of {case.stops}")


def _check_json(case: Case, data: dict[str, Any]) -> None:
    chat = case.path.endswith("chat/completions")
    texts, finishes = {}, {}
    for choice in data["choices"]:
        index = choice["index"]
        texts[index] = choice["message"]["content"] if chat else choice["text"]
        finishes[index] = choice["finish_reason"]
        wants_logprobs = case.body.get("logprobs") if chat else case.body.get("logprobs") is not None
        if wants_logprobs and not choice["logprobs"]:
            raise BadAnswer(f"choice {index} has no logprobs")
    check_choices(case, texts, finishes)
    usage = data["usage"]
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        raise BadAnswer(f"usage does not add up: {usage}")


async def _read_stream(case: Case, response: httpx.Response) -> str:
    chat = case.path.endswith("chat/completions")
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    chunks = 0
    done = False
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        data = json.loads(payload)
        if "error" in data:
            raise ErrorEvent(str(data["error"]))
        for choice in data["choices"]:
            index = choice["index"]
            piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            texts[index] = texts.get(index, "") + (piece or "")
            if choice.get("finish_reason") is not None:
                finishes[index] = choice["finish_reason"]
        chunks += 1
        if case.behaviour is Behaviour.ABORT_STREAM and chunks >= case.abort_after_chunks:
            return "aborted"  # leaving the ``async with`` closes the connection mid-stream
        if case.read_delay_s:
            await asyncio.sleep(case.read_delay_s)
    if not done:
        raise BadAnswer("stream ended without [DONE]")
    check_choices(case, texts, finishes)
    return "ok"


async def _send(client: httpx.AsyncClient, case: Case) -> str:
    if case.stream:
        async with client.stream("POST", case.path, json=case.body) as response:
            if response.status_code != 200:
                await response.aread()
                return _refusal(case, response)
            return await _read_stream(case, response)
    if case.behaviour is Behaviour.ABORT_WAIT:
        try:
            await asyncio.wait_for(client.post(case.path, json=case.body), timeout=0.3)
        except TimeoutError:
            return "aborted"
        return "ok"  # it finished first: the engine was quick
    response = await client.post(case.path, json=case.body)
    if response.status_code != 200:
        return _refusal(case, response)
    if case.behaviour is Behaviour.REFUSED:
        raise BadAnswer(f"an invalid request was served: {response.text[:200]}")
    _check_json(case, response.json())
    return "ok"


def _refusal(case: Case, response: httpx.Response) -> str:
    """An expected refusal is a 400 in the OpenAI envelope naming the field; any other status is an error."""
    if case.behaviour is Behaviour.REFUSED and response.status_code == 400:
        error = response.json()["error"]
        if error.get("param") != case.expect_param or case.expect_param not in error["message"]:
            raise BadAnswer(f"refusal names {error.get('param')!r}, expected {case.expect_param!r}: {error}")
        return "refused"
    raise _HTTPStatus(response.status_code, response.text[:300])


class _HTTPStatus(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


async def run_case(client: httpx.AsyncClient, case: Case) -> Outcome:
    try:
        return Outcome(await _send(client, case), case.label)
    except _HTTPStatus as exc:
        return Outcome(f"http_{exc.status}", case.label, str(exc))
    except ErrorEvent as exc:
        return Outcome("stream_error", case.label, str(exc))
    except BadAnswer as exc:
        return Outcome("bad_answer", case.label, str(exc))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return Outcome("malformed", case.label, repr(exc))
    except httpx.HTTPError as exc:
        return Outcome(f"transport:{type(exc).__name__}", case.label, str(exc))
