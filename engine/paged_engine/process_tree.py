"""The engine's processes die with the process that started them (API server → engine core → workers), so no
kill, crash or ``SIGKILL`` of a parent leaves an orphan holding a device or a port."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process ``SIGKILL`` when its parent exits (Linux's ``PR_SET_PDEATHSIG``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the call took effect
        os._exit(1)
