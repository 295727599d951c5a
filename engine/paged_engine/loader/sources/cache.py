"""The download cache's layout, and the atomic publish that keeps half-written models out of it.

A download goes into a staging folder next to its final place and is renamed into place only when every file is
complete, with ``paged_source.json`` (what was fetched, the commit it resolved to, each file's size) written last
inside the staging folder. So a folder at a final name is always whole; a staging folder is only ever resumed
into, never served. Concurrent downloaders (pods sharing a volume) serialise on a lock file next to it.

Layout under the cache root (``$PAGED_CACHE/models``)::

    hub/<org>--<name>/snapshots/<commit>/    a published Hugging Face snapshot
    hub/<org>--<name>/refs/<revision>        the commit a branch or tag last resolved to
    s3/<bucket>/<prefix>/snapshots/<digest>/ a published S3 prefix (digest of its keys, sizes and ETags)
    .../.staging/<name>/                     an unfinished download (resumed by the next attempt)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

logger = logging.getLogger(__name__)

RECORD = "paged_source.json"
LOCK_TIMEOUT_S = 6 * 3600.0


@dataclass(frozen=True)
class Placement:
    """Where one download lands: ``final`` once complete, ``staging`` while under way."""

    final: Path
    staging: Path
    lock: Path


def placement(final: Path) -> Placement:
    """Staging and lock sit next to ``final`` (same filesystem, so the publishing rename is atomic)."""
    hidden = final.parent / ".staging"
    return Placement(final, hidden / final.name, hidden / f"{final.name}.lock")


def hub_repo_dir(root: Path, repo_id: str) -> Path:
    return root / "hub" / repo_id.replace("/", "--")


def s3_prefix_dir(root: Path, bucket: str, prefix: str) -> Path:
    return root / "s3" / bucket / (prefix.strip("/").replace("/", "--") or "_")


def read_record(folder: Path) -> dict[str, Any] | None:
    """The record of a published folder, or None when the folder is not a complete download."""
    try:
        return json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(place: Placement) -> Iterator[None]:
    place.lock.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(place.lock), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        logger.info("another process is downloading into %s; waiting for it", place.final)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def publish(place: Placement, record: dict[str, Any]) -> Path:
    """Writes the record into the complete staging folder and renames it to its final name."""
    staging = place.staging
    shutil.rmtree(staging / ".cache", ignore_errors=True)  # the hub client's resume bookkeeping
    (staging / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True))
    _fsync_tree(staging)
    if place.final.exists():  # an older copy under the same name (download --dest with a moved revision)
        old = place.final.with_name(f".{place.final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        place.final.rename(old)
        staging.rename(place.final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        place.final.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(place.final)
    logger.info("published %s", place.final)
    return place.final


def discard(place: Placement) -> None:
    """Drops a staging folder (after a disk-full error, resuming into it would only fail again)."""
    shutil.rmtree(place.staging, ignore_errors=True)


def file_sizes(folder: Path) -> dict[str, int]:
    """Sizes of the complete top-level files already in ``folder`` (empty when it does not exist)."""
    if not folder.is_dir():
        return {}
    return {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file()}


def free_bytes(folder: Path) -> int:
    """Free space on the filesystem that holds (or will hold) ``folder``."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _fsync_tree(folder: Path) -> None:
    """Flushes the files before the rename publishes them (a node crash must not leave a short file behind)."""
    for file in folder.iterdir():
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
