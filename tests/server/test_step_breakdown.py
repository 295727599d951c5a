"""The step-time breakdown a serving engine exports (``paged_step_phase_seconds{phase}``): every phase of the
engine core and the server-side ones (decoding, detokenising, writing streamed chunks) are observed while requests
are served, and the engine's phases are observed once per step (so their sums are comparable: a share of the
step's time)."""

from __future__ import annotations

import openai
import pytest

from tests.server.conftest import MODEL_NAME, ServerProcess, scrape

pytestmark = [pytest.mark.server, pytest.mark.gemma]

ENGINE_PHASES = ("schedule", "prepare", "model", "attention", "sample", "update")


def test_every_phase_is_observed_while_serving(server: ServerProcess, client: openai.OpenAI) -> None:
    before = scrape(server)
    out = client.completions.create(model=MODEL_NAME, prompt="Count with me.", max_tokens=12, temperature=0,
                                    extra_body={"ignore_eos": True})  # fmt: skip
    assert out.choices[0].finish_reason == "length"
    stream = client.completions.create(model=MODEL_NAME, prompt="Count with me.", max_tokens=12, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    chunks = list(stream)
    after = scrape(server)

    def delta(phase: str, suffix: str) -> float:
        key = f"paged_step_phase_seconds_{suffix}{{phase={phase}}}"
        return after.get(key, 0.0) - before.get(key, 0.0)

    steps = {phase: delta(phase, "count") for phase in ENGINE_PHASES}
    assert min(steps.values()) >= 24 and len(set(steps.values())) == 1, steps  # one observation per step
    assert all(delta(phase, "sum") > 0 for phase in (*ENGINE_PHASES, "ipc_decode"))
    assert delta("detokenize", "count") >= 24  # one per output the requests received
    assert delta("http", "count") == len(chunks) + 1  # every streamed chunk written, and the closing [DONE]
    assert delta("http", "sum") > 0
    assert delta("ipc_decode", "count") >= steps["schedule"]
