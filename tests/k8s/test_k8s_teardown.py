"""The fixtures never leave a control plane behind: a pytest session stopped by SIGTERM mid-test still stops
every process it started, by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.cluster.binaries import Binaries
from e2e.cluster.client import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

INNER_TEST = """
import os, time
from pathlib import Path

def test_hold(kube_cluster):
    pids = " ".join(str(p.pid) for p in kube_cluster.processes.processes)
    Path(os.environ["PIDS_FILE"]).write_text(pids)
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_sigterm_mid_test_stops_every_control_plane_process(kube_binaries: Binaries, tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    pids_file = tmp_path / "pids"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "e2e.cluster.pytest_plugin", "-p", "no:cacheprovider"]
    argv += ["--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / "test_inner.py")]
    inner = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "PIDS_FILE": str(pids_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        pids = wait_for(
            "the inner session's control plane",
            lambda: inner.poll() is None and pids_file.exists() and pids_file.read_text(),
            timeout_s=180,
            interval_s=0.5,
        )
        pids = [int(p) for p in pids.split()]
        assert len(pids) == 5 and all(_alive(p) for p in pids)  # etcd, apiserver, controller-manager, scheduler, kwok

        inner.send_signal(signal.SIGTERM)
        output, _ = inner.communicate(timeout=120)
    finally:
        if inner.poll() is None:
            inner.kill()
    # pytest's "interrupted" exit: the SIGTERM became a KeyboardInterrupt and the finalizers ran (a plain SIGTERM
    # death would be -15 and leave the clean-up to PR_SET_PDEATHSIG alone).
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, output
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], output
