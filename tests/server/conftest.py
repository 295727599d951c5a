"""Real `paged-engine serve` processes on 127.0.0.1, serving a tiny random Gemma 3 with the real Gemma tokenizer.

The tiny model keeps each step in the milliseconds while exercising the real code path (sliding-window and
global layers, the real vocabulary, chat template and byte-fallback detokenisation). The servers run the default
attention backend, as users do (``auto``: our CPU kernels here); ``test_attention_backends.py`` compares it with
the torch reference over HTTP.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.markers import require_mark

if TYPE_CHECKING:
    from paged_engine.attention.selection import Selection

API_KEY = "test-api-key"
ADMIN_TOKEN = "test-admin-token"
MODEL_NAME = "tiny-gemma"
TINY_HEAD_SIZE = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gemma(tmp_path_factory.mktemp("tiny-gemma"))


def build_tiny_gemma(folder: Path) -> Path:
    """Writes the tiny Gemma 3 (random weights, the real tokenizer) into ``folder``."""
    import torch
    import transformers as tf
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

    real = resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (real / name).is_file():
            shutil.copy(real / name, folder / name)
    config = tf.Gemma3TextConfig(
        vocab_size=262144, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=TINY_HEAD_SIZE, sliding_window=256, max_position_embeddings=1024,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=32,
        bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = tf.Gemma3ForCausalLM(config)
    with torch.no_grad():  # larger weights than the default init, so greedy choices are well separated
        for name, param in model.named_parameters():
            if param.dim() == 2 and "embed" not in name:
                param.normal_(0.0, 0.2)
    model.config.architectures = ["Gemma3ForCausalLM"]
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def auto_attention(dtype: str = "float32") -> Selection:
    """What ``--attention-backend auto`` serves the tiny Gemma with on this machine: the engine's own rule applied
    to this machine's kernel build (``test_attention_selection.py`` pins that this is our CPU kernels on CI)."""
    from paged_engine.attention.selection import AttentionShape, select
    from paged_engine.engine.startup import kernel_build

    return select("auto", AttentionShape("cpu", dtype, TINY_HEAD_SIZE, 16), kernel_build())


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def core_pid(self) -> int:
        """The engine-core child process (the spawned multiprocessing child running the model)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        for pid in children:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"spawn_main" in cmdline:
                return int(pid)
        raise AssertionError(f"no engine-core child among {children}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def start_server(
    model: Path | str, log_dir: Path, *extra: str, timeout: float = 180.0, env: dict[str, str] | None = None
) -> ServerProcess:
    """``paged-engine serve model`` with what a user gets by default (``--attention-backend auto``: our kernels on
    this CPU), plus ``extra``; returns once ``/ready`` answers. The calling test must be marked ``server``."""
    require_mark("server", "starts an engine server")
    port = free_port()
    log_path = log_dir / f"server-{port}.log"
    command = [
        sys.executable, "-m", "paged_engine.cli", "serve", str(model), "--port", str(port),
        "--served-model-name", MODEL_NAME, "--log-level", "info", *extra,
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=environment)
    return wait_ready(ServerProcess(process, port, log_path), "/ready", timeout)


def wait_ready(server: ServerProcess, path: str, timeout: float, poll_s: float = 0.3) -> ServerProcess:
    """Returns ``server`` once ``path`` answers 200; fails with its log if it exits or is not ready in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"{server.process.args!r} exited with {server.process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}{path}", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    server.stop()
    raise AssertionError(f"server not ready within {timeout}s:\n{server.log()}")


COMMON_ARGS = ("--kv-cache-memory", "64MiB", "--block-size", "16", "--max-model-len", "1024")


@pytest.fixture(scope="module")
def server(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tiny_gemma_dir, tmp_path_factory.mktemp("logs"), *COMMON_ARGS,
        "--api-key", API_KEY, "--admin-token", ADMIN_TOKEN, "--max-num-seqs", "32",
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture
def client(server: ServerProcess):
    import openai

    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


def scrape(server: ServerProcess) -> dict[str, float]:
    """``/metrics`` as {series-with-labels: value}, plus each name alone when it has a single series."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics", timeout=10).text):
        for sample in family.samples:
            values.setdefault(sample.name, sample.value)
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model_name")
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def engine_info(server: ServerProcess) -> dict[str, str]:
    """The labels of ``paged_engine_info``: what serves (device, dtype, attention backend, kernel variants...)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    (sample,) = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "paged_engine_info"]
    return dict(sample.labels)


def admin(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
