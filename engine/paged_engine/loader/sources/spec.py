"""Parse what the user wrote (``MODEL`` of ``paged-engine serve``/``download``) into a model source. Pure.

Precedence, so that what worked before keeps working: ``s3://`` is S3; a path that exists (or is absolute, or
starts with ``.``/``~``, or names a ``.gguf`` file) is local; ``ORG/NAME`` is a Hugging Face repo. A revision
only makes sense for a Hugging Face repo and is refused elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure

#: The hub's own rule for repo ids: ``org/name``, each part of letters, digits, ``-``, ``_``, ``.``.
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
#: A bucket name as S3 allows it (3-63 characters, lower case, digits, dots and dashes).
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class LocalSource:
    """A model folder or ``.gguf`` file on this machine (or the built-in default when ``path`` is None)."""

    path: str | None


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str = DEFAULT_REVISION

    @property
    def pinned(self) -> bool:
        """A commit sha names immutable content: a cached copy needs no look-up."""
        return bool(COMMIT_SHA.match(self.revision))

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str
    """The key prefix, without leading slash, ending in ``/`` (a folder), or empty for the whole bucket."""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


ModelSource = LocalSource | HubSource | S3Source


def _looks_local(text: str) -> bool:
    return text.startswith(("/", ".", "~")) or text.endswith(".gguf")


def parse_source(
    text: str | None, revision: str | None = None, path_exists: Callable[[str], bool] = lambda _: False
) -> ModelSource:
    """The source ``text`` names; ``path_exists`` (``os.path.exists`` in practice) lets a local ``org/name``
    folder win over the hub id of the same spelling."""
    if text is None or text in ("", "default"):
        if revision is not None:
            raise ModelSourceError(SourceFailure.INVALID, "--revision applies to a Hugging Face repo id only")
        return LocalSource(None)
    if text.startswith("s3://"):
        if revision is not None:
            raise ModelSourceError(SourceFailure.INVALID, "--revision applies to a Hugging Face repo id, not s3://")
        return _parse_s3(text)
    if path_exists(text) or _looks_local(text):
        if revision is not None:
            raise ModelSourceError(SourceFailure.INVALID, f"--revision applies to a Hugging Face repo id, not {text}")
        return LocalSource(text)
    if REPO_ID.match(text) and ".." not in text:
        rev = revision or DEFAULT_REVISION
        if not rev or len(rev) > 256 or any(c.isspace() for c in rev) or ".." in rev:
            raise ModelSourceError(SourceFailure.INVALID, f"invalid revision {rev!r}: a branch, tag or commit sha")
        return HubSource(text, rev)
    return LocalSource(text)  # not a repo id: reported as a missing path by the local loader


def _parse_s3(text: str) -> S3Source:
    rest = text.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not BUCKET.match(bucket):
        raise ModelSourceError(
            SourceFailure.INVALID, f"invalid S3 bucket {bucket!r} in {text} (3-63 of a-z 0-9 . -; s3://BUCKET/PREFIX)"
        )
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ModelSourceError(SourceFailure.INVALID, f"S3 prefix {prefix!r} must not contain '.' or '..' segments")
    return S3Source(bucket, "/".join(parts) + "/" if parts else "")
