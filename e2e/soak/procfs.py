"""What a process holds, read from ``/proc``: resident memory, open file descriptors, threads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ProcSample:
    rss_bytes: int
    fds: int
    threads: int


def sample(pid: int) -> ProcSample:
    proc = Path(f"/proc/{pid}")
    resident_pages = int((proc / "statm").read_text().split()[1])
    return ProcSample(resident_pages * PAGE, len(os.listdir(proc / "fd")), len(os.listdir(proc / "task")))


def open_fds(pid: int) -> list[str]:
    """Where each descriptor points (``socket:[123]``, a path, ``anon_inode:[eventpoll]``): names a leak."""
    fd_dir = Path(f"/proc/{pid}/fd")
    targets = []
    for fd in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(fd_dir / fd))
        except FileNotFoundError:  # closed while listing
            continue
    return sorted(targets)
