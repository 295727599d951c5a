"""Fetch a remote model source into a local folder: the engine's cache, or a folder an init container names.

Cache mode (``paged-engine serve ORG/NAME``, ``LLM("ORG/NAME")``): one folder per commit (hub) or content
digest (S3). A commit sha as revision is served from the cache without asking the hub; a branch or tag is
resolved online (the answer kept in ``refs/``), and read from ``refs/`` when ``HF_HUB_OFFLINE`` is set or the hub
cannot be reached.

Destination mode (``paged-engine download SOURCE --dest DIR``): the model lands at exactly ``DIR``; a ``DIR``
already holding the same source and revision is kept as it is, so every replica's init container after the
first returns at once, and a pod never sees a different commit than its siblings on the same volume.
"""

from __future__ import annotations

import logging
from pathlib import Path

from paged_engine.loader.gguf_loader import cache_root
from paged_engine.loader.sources import cache, hub, s3
from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure
from paged_engine.loader.sources.spec import HubSource, S3Source

logger = logging.getLogger(__name__)
RemoteSource = HubSource | S3Source


def fetch(source: RemoteSource, dest: Path | None = None) -> Path:
    """The local folder holding ``source``'s serving files, downloading them when needed."""
    if dest is not None and dest.is_mount():
        raise ModelSourceError(SourceFailure.INVALID, f"--dest {dest} is a mount point: name a folder inside it "
                               "(the download is staged beside the folder and renamed into place)")  # fmt: skip
    if isinstance(source, HubSource):
        return _hub_to(source, dest) if dest is not None else _hub_cached(source, cache_root())
    return _s3_to(source, dest) if dest is not None else _s3_cached(source, cache_root())


def _complete(folder: Path) -> bool:
    return cache.read_record(folder) is not None


def _hub_cached(source: HubSource, root: Path) -> Path:
    repo_dir = cache.hub_repo_dir(root, source.repo_id)
    ref = repo_dir / "refs" / source.revision
    if source.pinned and _complete(snapshot := repo_dir / "snapshots" / source.revision):
        logger.info("using cached %s", snapshot)
        return snapshot
    try:
        if hub.offline():
            raise ModelSourceError(SourceFailure.OFFLINE, f"HF_HUB_OFFLINE is set and {source} is not in the cache "
                                   f"({repo_dir}); download it first (paged-engine download) or unset it")  # fmt: skip
        commit, sizes = hub.resolve(source)
    except ModelSourceError as exc:
        if exc.reason not in (SourceFailure.OFFLINE, SourceFailure.UNREACHABLE):
            raise
        cached = ref.read_text().strip() if ref.is_file() else ""
        if cached and _complete(snapshot := repo_dir / "snapshots" / cached):
            logger.warning("%s; using the cached commit %s of %s", exc, cached[:12], source)
            return snapshot
        raise
    place = cache.placement(repo_dir / "snapshots" / commit)
    with cache.locked(place):
        if not _complete(place.final):
            hub.download(source, commit, sizes, place)
    if not source.pinned:
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return place.final


def _hub_to(source: HubSource, dest: Path) -> Path:
    def done() -> bool:
        record = cache.read_record(dest) or {}
        return record.get("repo") == source.repo_id and source.revision in (record.get("revision"),
                                                                              record.get("commit"))  # fmt: skip

    if done():
        logger.info("%s already holds %s", dest, source)
        return dest
    if hub.offline():
        raise ModelSourceError(SourceFailure.OFFLINE, f"HF_HUB_OFFLINE is set and {dest} does not hold {source}")
    commit, sizes = hub.resolve(source)
    place = cache.placement(dest)
    with cache.locked(place):
        if done():  # another process (a sibling pod on the same volume) finished it while this one waited
            logger.info("%s already holds %s", dest, source)
        else:
            hub.download(source, commit, sizes, place)
    return dest


def _s3_cached(source: S3Source, root: Path) -> Path:
    client = s3.client()
    version, files = s3.resolve(client, source)
    place = cache.placement(cache.s3_prefix_dir(root, source.bucket, source.prefix) / "snapshots" / version)
    with cache.locked(place):
        if not _complete(place.final):
            s3.download(client, source, version, files, place)
    return place.final


def _s3_to(source: S3Source, dest: Path) -> Path:
    client = s3.client()
    version, files = s3.resolve(client, source)

    def done() -> bool:
        record = cache.read_record(dest) or {}
        return record.get("uri") == str(source) and record.get("version") == version

    place = cache.placement(dest)
    with cache.locked(place):
        if done():
            logger.info("%s already holds %s", dest, source)
        else:
            s3.download(client, source, version, files, place)
    return dest
