"""Child processes of the test bed, tracked by PID so that every one is stopped, whatever way the tests end."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGKILL when pytest dies, even by SIGKILL, so no etcd or
    apiserver outlives the session."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessError(RuntimeError):
    """A test-bed process exited or never became ready; the message carries the tail of its log."""


@dataclass
class ManagedProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError as exc:
            return f"<log {self.log_path} unreadable: {exc}>"
        return data[-max_bytes:].decode(errors="replace")

    def ensure_running(self) -> None:
        code = self.popen.poll()
        if code is not None:
            raise ProcessError(f"{self.name} (pid {self.pid}) exited with code {code}; log tail:\n{self.log_tail()}")


class ProcessGroup:
    """Starts processes with their output in one log file each and stops them in reverse start order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []

    def start(
        self, name: str, argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                [os.fspath(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                # Own session: a Ctrl-C in the terminal reaches pytest only, which then stops these in order.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        proc = ManagedProcess(name, popen, log_path)
        self.processes.append(proc)
        return proc

    def ensure_running(self) -> None:
        for proc in self.processes:
            proc.ensure_running()

    def guard(self, check: Callable[[], T]) -> Callable[[], T]:
        """``check`` preceded by a liveness check, for wait loops: a crashed component fails the wait at once, with
        its log, instead of after the timeout."""

        def guarded() -> T:
            self.ensure_running()
            return check()

        return guarded

    def find(self, name: str) -> ManagedProcess | None:
        """The process started as ``name`` and not stopped since, if any."""
        return next((p for p in self.processes if p.name == name), None)

    def stop(self, name: str, grace_s: float = 10.0) -> None:
        """Stop the process started as ``name`` (a no-op when there is none)."""
        for proc in [p for p in self.processes if p.name == name]:
            self.processes.remove(proc)
            _terminate(proc, grace_s)

    def stop_all(self, grace_s: float = 10.0) -> None:
        """SIGTERM each process by PID, newest first, then SIGKILL whatever has not exited within ``grace_s``.
        Safe to call more than once."""
        while self.processes:
            _terminate(self.processes.pop(), grace_s)


def _terminate(proc: ManagedProcess, grace_s: float) -> None:
    if proc.popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
        os.kill(proc.pid, signal.SIGCONT)  # a process a test paused (SIGSTOP) would act on the SIGTERM only then
    try:
        proc.popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait()
