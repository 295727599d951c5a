"""The soak (e2e/soak): its request mix and pass criteria on their own, then a 2-minute run against a real server.

The live run is the CI version of ``python -m e2e.soak`` (10 minutes by default): the same mix, probe and
criteria, on a shorter clock.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from e2e.soak import MAX_MODEL_LEN, SERVER_ARGS
from e2e.soak.client import BadAnswer, Outcome, check_choices
from e2e.soak.procfs import ProcSample
from e2e.soak.run import Idle, SoakConfig, SoakReport, failures, run_soak
from e2e.soak.workload import Behaviour, Case, Limits, draw_case
from tests.server.conftest import ADMIN_TOKEN, API_KEY, MODEL_NAME, start_server

LIMITS = Limits(MAX_MODEL_LEN, MODEL_NAME)


def draws(count: int, seed: int = 0) -> list[Case]:
    rng = random.Random(seed)
    return [draw_case(rng, LIMITS) for _ in range(count)]


def test_the_mix_is_reproducible_and_covers_every_behaviour() -> None:
    cases = draws(3000)
    assert [c.body for c in cases[:50]] == [c.body for c in draws(50)]
    labels = {c.label for c in cases}
    for behaviour in Behaviour:
        assert any(c.behaviour is behaviour for c in cases), behaviour
    for kind in ("completion-json", "completion-stream", "chat-json", "chat-stream", "completion-long-json"):
        assert any(label.startswith(kind) for label in labels), kind
    assert any(c.n > 1 for c in cases) and any(c.stops for c in cases)
    assert any("logprobs" in c.body for c in cases) and any("stream_options" in c.body for c in cases)


def test_served_cases_fit_the_context_and_refused_ones_do_not() -> None:
    for case in draws(3000, seed=1):
        prompt = case.body.get("prompt")
        prompt_len = len(prompt) if isinstance(prompt, list) else 0
        if case.behaviour is Behaviour.REFUSED:
            assert prompt_len > MAX_MODEL_LEN or case.body["max_tokens"] >= MAX_MODEL_LEN
            continue
        assert prompt_len + case.body["max_tokens"] <= MAX_MODEL_LEN
        assert 1 <= case.n <= LIMITS.max_n
        if case.behaviour in (Behaviour.ABORT_STREAM, Behaviour.ABORT_WAIT):
            assert case.body["ignore_eos"] and not case.stops  # still running when the client leaves


def test_an_answer_with_a_stop_string_or_a_missing_choice_is_bad() -> None:
    case = Case("/v1/completions", {"prompt": "x", "n": 2, "stop": ["."]}, Behaviour.READ_ALL)
    check_choices(case, {0: "ab", 1: "cd"}, {0: "stop", 1: "length"})
    with pytest.raises(BadAnswer, match="stop string"):
        check_choices(case, {0: "a.b", 1: "cd"}, {0: "stop", 1: "length"})
    with pytest.raises(BadAnswer, match="choices"):
        check_choices(case, {0: "ab"}, {0: "stop"})
    with pytest.raises(BadAnswer, match="finish_reason"):
        check_choices(case, {0: "ab", 1: "cd"}, {0: "stop", 1: None})


def idle(fds: int = 10, threads: int = 4, kv: float = 0.0, fd_names: list[str] | None = None) -> Idle:
    engine = {"paged_kv_cache_usage_ratio": kv, "paged_requests_running": 0, "paged_requests_waiting": 0,
              "in_flight": 0}  # fmt: skip
    return Idle({"api": ProcSample(100 << 20, fds, threads)}, {"api": fd_names or ["/dev/null"] * fds}, engine)


def report(rss: list[int], before: Idle, after: Idle, unexpected: tuple[Outcome, ...] = ()) -> SoakReport:
    r = SoakReport(capacity_rps=10, offered_rps=9, duration_s=120, unexpected=list(unexpected))
    r.rss = {"api": [(t * 120 / (len(rss) - 1), v) for t, v in enumerate(rss)]}
    r.before, r.after = before, after
    return r


def test_pass_criteria() -> None:
    flat = [100 << 20] * 10
    assert failures(report(flat, idle(), idle())) == []
    assert "1 unexpected errors {'http_500'" in failures(report(flat, idle(), idle(), (Outcome("http_500", "x"),)))[0]
    assert "paged_kv_cache_usage_ratio is 0.25" in failures(report(flat, idle(), idle(kv=0.25)))[0]
    growing = [100 << 20] * 5 + [110 << 20] * 5
    assert "api RSS grew 10.0%" in failures(report(growing, idle(), idle()))[0]
    leaked = idle(fds=11, fd_names=["/dev/null"] * 10 + ["socket:[42]"])
    assert "1 more file descriptors: {'socket:[42]': 1}" in failures(report(flat, idle(), leaked))[0]
    assert "2 more threads" in failures(report(flat, idle(), idle(threads=6)))[0]


@pytest.mark.server
@pytest.mark.gemma
@pytest.mark.slow
def test_two_minute_soak_serves_everything_and_leaks_nothing(tiny_gemma_dir: Path, tmp_path: Path) -> None:
    server = start_server(tiny_gemma_dir, tmp_path, *SERVER_ARGS, "--api-key", API_KEY, "--admin-token", ADMIN_TOKEN)
    try:
        config = SoakConfig(
            server.url, LIMITS, {"api": server.process.pid, "core": server.core_pid()}, duration_s=120, probe_s=15,
            api_key=API_KEY, admin_token=ADMIN_TOKEN,
        )  # fmt: skip
        result = run_soak(config)
    finally:
        assert server.stop() == 0
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    assert failures(result) == [], summary
    assert result.outcomes["ok"] > 0 and result.outcomes["aborted"] > 0 and result.outcomes["refused"] > 0
    assert result.after is not None and result.after.engine["finished_abort"] > 0
