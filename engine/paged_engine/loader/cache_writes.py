"""Writing into the model cache so that a reader never sees half an entry.

An entry (a converted model folder, an assembled GGUF file) is written under a hidden ``.NAME.partial-*`` name
next to its final one, flushed to disk, then renamed into place: the final name exists only once complete.
Writers of one entry take an exclusive ``flock`` on ``.NAME.lock`` first, so a second process waits and then
finds the entry done instead of converting it again; and any ``.NAME.partial-*`` found while holding the lock
was left by a writer that died (killed, out of disk): it is removed.

Invariants: ``target`` is either absent or complete; a failed write leaves no partial behind (or, if the writer
was killed, the next writer of that entry removes it).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


@contextlib.contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Holds the entry's lock (waits for another writer of the same entry to finish)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def remove_partials(target: Path) -> None:
    """Removes what dead writers of ``target`` left (call it holding ``exclusive(target)``)."""
    for stale in target.parent.glob(f".{target.name}.partial-*"):
        log.warning("removing %s, left by an interrupted write", stale)
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """A fresh folder to fill; renamed to ``target`` when the block succeeds, removed when it fails.
    Call it holding ``exclusive(target)``; ``target`` must not exist yet."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        yield tmp
        for file in tmp.iterdir():
            _fsync(file)
        _fsync(tmp)
        tmp.rename(target)
        _fsync(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_file(target: Path) -> Iterator[Path]:
    """A path to write; renamed to ``target`` (replacing it) when the block succeeds, removed when it fails."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.partial-", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync(tmp)
        tmp.replace(target)
        _fsync(target.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
