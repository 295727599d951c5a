"""``paged-engine download ORG/NAME`` with the real ``huggingface_hub`` client against a hub on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sources.conftest import GATED_ID, REPO_ID, SERVING, TOKEN, WEIGHTS, repo_files
from tests.sources.hub_server import HubServer, Repo


def test_downloads_only_serving_files_pinned_to_the_commit(download, hub: HubServer, tmp_path: Path) -> None:
    run = download(REPO_ID, "--revision", "v1")
    assert run.returncode == 0, run.stderr
    folder = Path(run.stdout)
    assert folder == tmp_path / "cache" / "models" / "hub" / "acme--tiny" / "snapshots" / ("b" * 40)
    files = {f.name for f in folder.iterdir()}
    assert files == SERVING | {"paged_source.json"}
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    record = json.loads((folder / "paged_source.json").read_text())
    assert (record["repo"], record["revision"], record["commit"]) == (REPO_ID, "v1", "b" * 40)
    assert (folder.parent.parent / "refs" / "v1").read_text() == "b" * 40
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.state.requests if method == "GET"}
    assert "pytorch_model.bin" not in fetched and "README.md" not in fetched


def test_success_leaves_the_resolved_commit_in_the_termination_log(download, tmp_path: Path) -> None:
    """What the operator shows in ModelReady: the commit the branch resolved to."""
    log = tmp_path / "termination-log"
    run = download(REPO_ID, "--revision", "v1", "--dest", str(tmp_path / "dest"), "--termination-log", str(log))
    assert run.returncode == 0, run.stderr
    assert log.read_text() == f"Downloaded: {REPO_ID}@v1 at commit {'b' * 40}"


def test_a_pinned_commit_in_the_cache_needs_no_hub(download, hub: HubServer) -> None:
    first = download(REPO_ID, "--revision", "a" * 40)
    assert first.returncode == 0, first.stderr
    hub.state.requests.clear()
    again = download(REPO_ID, "--revision", "a" * 40)
    assert again.returncode == 0 and again.stdout == first.stdout
    assert hub.state.requests == []


def test_offline_uses_the_recorded_revision_and_refuses_what_is_not_cached(download) -> None:
    online = download(REPO_ID)
    assert online.returncode == 0, online.stderr
    offline = download(REPO_ID, env={"HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == online.stdout
    missing = download(REPO_ID, "--revision", "v1", env={"HF_HUB_OFFLINE": "1"})
    assert missing.returncode == 1
    assert "OfflineNotCached: HF_HUB_OFFLINE is set and acme/tiny@v1 is not in the cache" in missing.stderr


def test_gated_model_needs_a_token(download, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    run = download(GATED_ID, "--termination-log", str(log))
    assert run.returncode == 1
    message = log.read_text()
    assert message.startswith("ModelGated: acme/gated is a gated model: accept its terms"), message
    assert "HF_TOKEN" in message
    assert "Traceback" not in run.stderr
    wrong = download(GATED_ID, env={"HF_TOKEN": "hf_wrong"})
    assert wrong.returncode == 1 and "ModelGated" in wrong.stderr and "has no access" in wrong.stderr
    good = download(GATED_ID, env={"HF_TOKEN": TOKEN})
    assert good.returncode == 0, good.stderr
    assert (Path(good.stdout) / "model.safetensors").read_bytes() == WEIGHTS


def test_unknown_repo_and_revision(download) -> None:
    run = download("acme/nothing-here")
    assert run.returncode == 1
    assert "ModelNotFound: no model acme/nothing-here on http://127.0.0.1:" in run.stderr
    assert "Traceback" not in run.stderr
    rev = download(REPO_ID, "--revision", "no-such-branch")
    assert rev.returncode == 1 and "ModelNotFound: acme/tiny has no revision 'no-such-branch'" in rev.stderr


def test_repo_without_safetensors(download) -> None:
    run = download("acme/bin-only")
    assert run.returncode == 1
    assert "NoSafetensors: acme/bin-only at" in run.stderr and "it has only *.bin weights" in run.stderr


def test_dest_mode_lands_at_the_folder_and_is_idempotent(download, hub: HubServer, tmp_path: Path) -> None:
    dest = tmp_path / "volume" / "acme--tiny" / "main"
    run = download(REPO_ID, "--dest", str(dest))
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout) == dest and (dest / "model.safetensors").read_bytes() == WEIGHTS
    assert not (dest / ".cache").exists()
    hub.state.requests.clear()
    again = download(REPO_ID, "--dest", str(dest), env={"HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr
    assert hub.state.requests == []


def test_a_connection_cut_mid_file_is_resumed_with_a_range_request(download, hub: HubServer) -> None:
    big = os.urandom(24 << 20)  # the client writes in 10 MiB chunks and resumes from the last one it wrote
    hub.state.repos["acme/big"] = Repo({**repo_files(), "model.safetensors": big})
    hub.state.drop_once["model.safetensors"] = 15 << 20
    run = download("acme/big")
    assert run.returncode == 0, run.stderr
    assert (Path(run.stdout) / "model.safetensors").read_bytes() == big
    ranges = [r for method, path, r in hub.state.requests if method == "GET" and path.endswith("model.safetensors")]
    assert ranges == [None, f"bytes={10 << 20}-"]


def test_a_killed_download_leaves_no_model_and_the_next_run_keeps_finished_files(hub: HubServer, tmp_path: Path):
    """A download killed in the middle of the weights leaves nothing at the final place (a later start cannot
    serve half a model); the next run fetches only the files that were not finished."""
    hub.state.slow_files["model.safetensors"] = 0.05  # 64 KiB per 50 ms: the 4 MiB weights take ~3 s
    dest = tmp_path / "volume" / "tiny"
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}  # fmt: skip
    env.pop("HF_TOKEN", None)
    command = [sys.executable, "-m", "paged_engine.cli", "download", REPO_ID, "--dest", str(dest)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if any(m == "GET" and p.endswith("model.safetensors") for m, p, _ in list(hub.state.requests)):
            break
        time.sleep(0.02)
    time.sleep(0.5)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert not dest.exists(), "a killed download must not leave a model at its final place"
    staged = {f.name for f in (dest.parent / ".staging" / dest.name).iterdir() if f.is_file()}
    assert "config.json" in staged and "model.safetensors" not in staged

    hub.state.slow_files.clear()
    hub.state.requests.clear()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.state.requests if method == "GET"}
    assert "model.safetensors" in fetched and "config.json" not in fetched
    assert not (dest.parent / ".staging" / dest.name).exists()


def test_a_killed_download_restarts_the_cut_file_cleanly_and_nothing_half_written_is_served(
    hub: HubServer, tmp_path: Path
) -> None:
    """``paged-engine download`` SIGKILLed mid-file into the engine's cache (what ``serve ORG/NAME`` uses): no
    snapshot exists until the download completes, so an offline start refuses instead of serving half a model.
    The client never reuses a killed attempt's part (each attempt writes its own temporary file), so the next run
    removes it first, rather than needing room for both, fetches that file from its start and publishes it whole.
    """
    big = os.urandom(24 << 20)
    commit = Repo([]).commit
    hub.state.repos["acme/big"] = Repo({**repo_files(), "model.safetensors": big})
    hub.state.slow_files["model.safetensors"] = 0.01  # ~6 MiB/s: the client writes 10 MiB steps, ~2 s each
    cache = tmp_path / "cache"
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "PAGED_CACHE": str(cache)}  # fmt: skip
    env.pop("HF_TOKEN", None)
    command = [sys.executable, "-m", "paged_engine.cli", "download", "acme/big"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    staging = cache / "models" / "hub" / "acme--big" / "snapshots" / ".staging" / commit
    parts = staging / ".cache" / "huggingface" / "download"

    def partial() -> int:
        return sum(p.stat().st_size for p in parts.glob("*.incomplete")) if parts.is_dir() else 0  # the weights

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and partial() < 10 << 20:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    written = partial()
    assert 0 < written < len(big), f"killed mid-file: {written} of {len(big)} bytes written"
    snapshot = cache / "models" / "hub" / "acme--big" / "snapshots" / commit
    assert not snapshot.exists(), "a killed download must not publish a snapshot"
    offline = subprocess.run(command, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=60)
    assert offline.returncode == 1 and "OfflineNotCached" in offline.stderr, offline.stderr

    hub.state.slow_files.clear()
    hub.state.requests.clear()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == snapshot
    assert (snapshot / "model.safetensors").read_bytes() == big
    ranges = [r for method, path, r in hub.state.requests if method == "GET" and path.endswith("model.safetensors")]
    assert ranges == [None], "the cut file is fetched again from its start"
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.state.requests if method == "GET"}
    assert "config.json" not in fetched, "finished files are kept"
    assert "removing" in done.stderr and "left by a killed download" in done.stderr
    assert not staging.exists() and not list(snapshot.rglob("*.incomplete"))


def _tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {path} (the disk-full test needs root): {done.stderr.decode()}")


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "small"
    _tmpfs(mount, "2m")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_is_refused_before_downloading(download, hub: HubServer, small_disk: Path) -> None:
    run = download(REPO_ID, "--dest", str(small_disk / "tiny"))
    assert run.returncode == 1
    assert "DiskFull: not enough space in" in run.stderr and "the model needs 4.0 MiB more" in run.stderr
    assert not [p for _, p, _ in hub.state.requests if p.endswith("model.safetensors")]


def test_disk_full_while_writing_leaves_nothing_behind(download, hub: HubServer, small_disk: Path) -> None:
    hub.state.sizes_in_listing = False  # the sizes are unknown up front: the write itself runs out of room
    dest = small_disk / "tiny"
    run = download(REPO_ID, "--dest", str(dest))
    assert run.returncode == 1, run.stdout
    assert "DiskFull: no space left on the device while downloading acme/tiny" in run.stderr
    assert "Traceback" not in run.stderr
    assert not dest.exists() and not (small_disk / ".staging" / "tiny").exists()


def test_the_fake_hub_serves_what_the_repo_holds() -> None:
    """The files the tests compare against are the ones the server was given (guards the fixtures)."""
    assert set(repo_files()) > SERVING


def test_replicas_sharing_a_volume_download_once(hub: HubServer, tmp_path: Path) -> None:
    """Two downloads into one folder at the same time (two pods on one claim): one fetches, the other waits for
    it and finds the model complete."""
    hub.state.slow_files["model.safetensors"] = 0.02
    dest = tmp_path / "volume" / "tiny"
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
    env.pop("HF_TOKEN", None)
    command = [sys.executable, "-m", "paged_engine.cli", "download", REPO_ID, "--dest", str(dest)]
    both = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    results = [p.communicate(timeout=120) for p in both]
    assert [p.returncode for p in both] == [0, 0], results
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    weights = [m for m, path, _ in hub.state.requests if m == "GET" and path.endswith("model.safetensors")]
    assert len(weights) == 1
    assert sum("already holds" in err for _, err in results) == 1
