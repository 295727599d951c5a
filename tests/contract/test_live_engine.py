"""The engine contract against a real engine: a ``paged-engine`` process started exactly as the operator renders a
pod (its arguments, and its environment from the ConfigMap and the admin Secret), then driven by the operator's
own engine client. Every budget the tuner may propose for that spec is taken; one past the engine's live limits is
refused, naming the field; the limits it reports are the ones the operator rendered."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paged_operator.clients.engine_admin import EngineAdmin, EnginePod
from paged_operator.policy.config import controller_spec, live_limits, starting_budgets
from paged_operator.render import children
from paged_platform import metric_names
from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.admin import BUDGETS_PATH, BudgetsReport
from paged_platform.engine_contract.budgets import MAX_NUM_BATCHED_TOKENS_BOUNDS, MAX_NUM_SEQS_BOUNDS, Budgets
from paged_platform.prometheus_text import parse

from tests.kubelet_env import container_environment
from tests.server.conftest import ServerProcess, free_port, tiny_gemma_dir, wait_ready

__all__ = ["tiny_gemma_dir"]
pytestmark = [pytest.mark.server, pytest.mark.gemma]

UID = "00000000-0000-4000-8000-0000000000e1"
TOKEN = "contract-test-admin-token"
#: Wider than the engine's default limits in both budgets, so the rendered limit flags are what makes them work.
SPEC = {
    "engine": {"maxModelLen": 256, "kvCacheMemory": "32Mi"},
    "schedulerBudget": {
        "maxNumSeqs": 16,
        "adaptive": {
            "enabled": True,
            "maxNumSeqs": {"min": 4, "max": 1024},
            "maxNumBatchedTokens": {"min": 64, "max": 65536},
        },
    },
}
MD = ModelDeployment.model_validate({"metadata": {"name": "contract", "namespace": "ns"}, "spec": SPEC})


@dataclass
class RenderedEngine:
    server: ServerProcess
    admin_url: str

    @property
    def pod(self) -> EnginePod:
        return EnginePod("pod-0", self.server.url, self.admin_url)


@pytest.fixture(scope="module")
def engine(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RenderedEngine]:
    """The rendered container as a process on 127.0.0.1: the model and the addresses are the only changes."""
    container = children.container(MD)
    cm = children.config_map(MD, UID, starting_budgets(MD.spec))
    env = container_environment(container["env"], {}, {cm["metadata"]["name"]: cm["data"]},
                                {children.secret_name(MD): {children.TOKEN_KEY: TOKEN}})  # fmt: skip
    args = list(container["args"])
    args[1] = str(tiny_gemma_dir)  # ``serve MODEL ...``: the model the pod would mount
    port, admin_port = free_port(), free_port()
    args += ["--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin_port), "--num-threads", "1"]
    log = tmp_path_factory.mktemp("contract") / "engine.log"
    environment = {**os.environ, **env, "OMP_NUM_THREADS": "1"}
    with log.open("wb") as out:
        command = [sys.executable, "-m", "paged_engine.cli", *args]
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment)
    server = wait_ready(ServerProcess(process, port, log), "/ready", 180.0)
    yield RenderedEngine(server, f"http://127.0.0.1:{admin_port}")
    server.stop()


def push(engine: RenderedEngine, budgets: Budgets) -> dict[str, str]:
    """The operator's own push: ``EngineAdmin.push_budgets``; pod → why for a refusal."""

    async def run() -> dict[str, str]:
        async with httpx.AsyncClient() as client:
            return await EngineAdmin(client, timeout_s=10).push_budgets([engine.pod], budgets, TOKEN)

    return asyncio.run(run())


def report(engine: RenderedEngine) -> BudgetsReport:
    answer = httpx.get(f"{engine.admin_url}{BUDGETS_PATH}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    return BudgetsReport.model_validate_json(answer.content)


def test_the_engine_starts_with_the_rendered_budgets_and_reports_the_rendered_limits(engine: RenderedEngine) -> None:
    now = report(engine)
    assert now.budgets == starting_budgets(MD.spec) and now.budget_limits == live_limits(MD.spec)
    series = {s.name: s.value for s in parse(httpx.get(f"{engine.server.url}/metrics", timeout=10).text)}
    assert series[metric_names.MAX_NUM_SEQS_LIMIT] == live_limits(MD.spec).max_num_seqs
    assert series[metric_names.MAX_NUM_BATCHED_TOKENS_LIMIT] == live_limits(MD.spec).max_num_batched_tokens


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wanted=st.tuples(st.integers(1, MAX_NUM_SEQS_BOUNDS.high), st.integers(1, MAX_NUM_BATCHED_TOKENS_BOUNDS.high)))
def test_every_budget_the_tuner_may_propose_is_taken(engine: RenderedEngine, wanted: tuple[int, int]) -> None:
    tuner = controller_spec(MD.spec).budget
    assert tuner is not None
    proposal = tuner.clamp(Budgets(min(wanted), wanted[1]))
    assert push(engine, proposal) == {}
    assert report(engine).budgets == proposal


def test_a_budget_past_the_live_limits_is_refused_naming_the_field(engine: RenderedEngine) -> None:
    limits = live_limits(MD.spec)
    before = report(engine).budgets
    failed = push(engine, Budgets(limits.max_num_seqs + 1, limits.max_num_batched_tokens))
    assert failed == {
        "pod-0": f"HTTP 400: max_num_seqs must be in [1, {limits.max_num_seqs}], got {limits.max_num_seqs + 1} "
        "(param max_num_seqs)"
    }
    assert report(engine).budgets == before  # nothing applied
