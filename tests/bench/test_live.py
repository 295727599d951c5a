"""``paged-ctl bench`` end to end against a real ``paged-engine serve`` with a tiny random Gemma 3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from paged_platform.ctl import app
from typer.testing import CliRunner

from tests.server.conftest import ServerProcess, start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]


@pytest.fixture(scope="module")
def server(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tiny_gemma_dir, tmp_path_factory.mktemp("logs"), "--kv-cache-memory", "64MiB", "--max-model-len", "512",
        "--max-num-seqs", "16", "--api-key", "bench-key",
    )  # fmt: skip
    yield proc
    proc.stop()


def bench(server: ServerProcess, tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "result.json"
    argv = ["bench", "--base-url", server.url, "--api-key", "bench-key", "--result-json", str(out), "--no-progress"]
    result = CliRunner().invoke(app, [*argv, *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def test_bounded_random_run_finishes_with_zero_errors(server: ServerProcess, tiny_gemma_dir: Path, tmp_path: Path):
    data, output = bench(
        server, tmp_path, "--num-prompts", "12", "--input-len", "24", "--output-len", "6", "--range-ratio", "0.5",
        "--max-concurrency", "4", "--tokenizer", str(tiny_gemma_dir), "--slo-ttft-ms", "600000",
    )  # fmt: skip
    assert (data["completed"], data["failed"], data["cancelled"], data["errors"]) == (12, 0, 0, {})
    assert data["metadata"]["model"] == "tiny-gemma"  # discovered from /v1/models
    # The server's usage counts: our synthetic prompts (+ BOS) and exactly the asked output lengths.
    assert 12 * 12 <= data["prompt_tokens"] <= 12 * 37
    assert 12 * 3 <= data["output_tokens"] <= 12 * 9
    assert data["ttft"]["count"] == 12 and data["e2el"]["count"] == 12
    assert data["ttft"]["median"] <= data["ttft"]["p90"] <= data["ttft"]["p99"]
    assert data["e2el"]["mean"] >= data["ttft"]["mean"]
    assert data["itl"]["count"] > 0 and data["tpot"]["count"] == 12
    assert data["good_requests"] == 12
    assert data["output_throughput"] == pytest.approx(data["output_tokens"] / data["duration"])
    assert "Successful requests" in output and "TTFT" in output


def test_shared_prefix_chat_run_hits_the_prefix_cache(server: ServerProcess, tmp_path: Path) -> None:
    def hits() -> float:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        lines = [line for line in text.splitlines() if line.startswith("paged_prefix_cache_hits_total")]
        return sum(float(line.split()[-1]) for line in lines)

    before = hits()
    data, _ = bench(
        server, tmp_path, "--dataset", "shared-prefix", "--endpoint", "chat", "--num-prompts", "8",
        "--num-prefixes", "2", "--prefix-len", "64", "--input-len", "8", "--output-len", "4", "--max-concurrency", "2",
    )  # fmt: skip
    assert (data["completed"], data["failed"]) == (8, 0)
    assert data["output_tokens"] == 32
    assert hits() - before >= 6 * 48  # six of eight requests reuse at least three 16-token blocks


def test_time_bound_cancels_the_rest(server: ServerProcess, tmp_path: Path) -> None:
    """200 requests at 4 per second would take about 50 s: the 3 s bound ends the run with some served and the
    rest cancelled (not failed), and says so."""
    data, output = bench(
        server, tmp_path, "--num-prompts", "200", "--input-len", "8", "--output-len", "4", "--request-rate", "4",
        "--burstiness", "0.5", "--max-duration", "3",
    )  # fmt: skip
    assert data["completed"] > 0 and data["cancelled"] > 0 and data["failed"] == 0
    assert data["completed"] + data["cancelled"] == 200
    assert "Cancelled or not sent" in output


def test_unreachable_server_and_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--no-progress"])
    assert result.exit_code == 2 and "cannot list models" in result.output
    result = runner.invoke(app, ["bench", "--model", "m", "--max-concurrency", "0", "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "max concurrency must be >= 1, got 0" in result.output
    result = runner.invoke(app, ["bench", "--slo-tpot-ms", "-5"])
    assert result.exit_code == 2 and "SLO tpot must be > 0 seconds" in result.output
