"""Hugging Face downloads through ``huggingface_hub``'s own client.

The client reads ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` itself, resumes a file whose connection
dropped with a range request, and draws a progress bar per file (``HF_HUB_DISABLE_PROGRESS_BARS`` turns it off).
It writes each attempt at a file to a temporary file of its own, so a process killed mid-file leaves a part that
no later attempt reuses: the next download removes such parts first (it holds the folder's lock, so no live
download owns them) and fetches that file again; finished files are kept.

This module asks the hub which commit the revision names (pinning it), picks the serving files, checks they fit,
and maps the client's errors onto :class:`SourceFailure` reasons with a message that says what to do.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from paged_engine.loader.sources import cache, selection
from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure
from paged_engine.loader.sources.spec import HubSource

logger = logging.getLogger(__name__)
T = TypeVar("T")


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _has_token() -> bool:
    from huggingface_hub import get_token

    return get_token() is not None


def resolve(source: HubSource) -> tuple[str, dict[str, int | None]]:
    """``(commit sha, {file: size})`` of the serving files at ``source.revision``, asked of the hub."""
    from huggingface_hub import HfApi

    info = _mapped(source, lambda: HfApi().model_info(source.repo_id, revision=source.revision, files_metadata=True))
    if not info.sha:
        raise ModelSourceError(SourceFailure.UNREACHABLE, f"the hub gave no commit for {source}")
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    names = selection.serving_files(sizes, f"{source.repo_id} at {info.sha[:12]}")
    return info.sha, {n: sizes[n] for n in names}


def download(source: HubSource, commit: str, sizes: dict[str, int | None], place: cache.Placement) -> Path:
    """Downloads the files into ``place`` (resuming what an earlier attempt left) and publishes it."""
    from huggingface_hub import hf_hub_download

    staging = place.staging
    _remove_killed_parts(staging)
    need = selection.missing_bytes(sizes, cache.file_sizes(staging))
    selection.check_space(need, cache.free_bytes(staging), str(place.final.parent))
    staging.mkdir(parents=True, exist_ok=True)
    total = sum(s or 0 for s in sizes.values())
    logger.info("downloading %d files (%.1f MiB) of %s at %s into %s", len(sizes), total / 2**20, source.repo_id,
                commit[:12], place.final)  # fmt: skip
    for name in sizes:
        try:
            _mapped(source, lambda n=name: hf_hub_download(source.repo_id, n, revision=commit, local_dir=staging))
        except ModelSourceError as exc:
            if exc.reason is SourceFailure.DISK_FULL:
                cache.discard(place)
            raise
    record = {"source": "huggingface", "repo": source.repo_id, "revision": source.revision, "commit": commit,
              "endpoint": _endpoint(), "files": cache.file_sizes(staging)}  # fmt: skip
    return cache.publish(place, record)


def _remove_killed_parts(staging: Path) -> None:
    """The client's ``*.incomplete`` files of a killed attempt (call holding the folder's lock)."""
    for part in (staging / ".cache" / "huggingface" / "download").glob("*.incomplete"):
        logger.info("removing %s (%.1f MiB), left by a killed download", part.name, part.stat().st_size / 2**20)
        part.unlink(missing_ok=True)


def _mapped(source: HubSource, call: Callable[[], T]) -> T:
    """Runs a hub call, turning its errors into :class:`ModelSourceError` with a reason."""
    from huggingface_hub import errors

    repo = source.repo_id
    try:
        return call()
    except errors.GatedRepoError:
        if _has_token():
            hint = "the token given (HF_TOKEN) has no access: accept the model's terms with that account"
        else:
            hint = "accept its terms on the hub and give a token with access (HF_TOKEN)"
        raise ModelSourceError(SourceFailure.GATED, f"{repo} is a gated model: {hint} ({_endpoint()}/{repo})") from None
    except errors.RevisionNotFoundError:
        raise ModelSourceError(SourceFailure.NOT_FOUND, f"{repo} has no revision {source.revision!r}") from None
    except errors.RepositoryNotFoundError:
        private = "" if _has_token() else " (a private repo needs a token: HF_TOKEN)"
        raise ModelSourceError(SourceFailure.NOT_FOUND, f"no model {repo} on {_endpoint()}{private}") from None
    except errors.RemoteEntryNotFoundError as exc:
        raise ModelSourceError(SourceFailure.NOT_FOUND, f"{repo}: a listed file is missing on the hub: {exc}") from None
    except errors.HfHubHTTPError as exc:
        raise _http_failure(repo, exc) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ModelSourceError(
                SourceFailure.DISK_FULL, f"no space left on the device while downloading {repo}: use a larger volume"
            ) from None
        raise
    except Exception as exc:
        if _is_transport_error(exc):
            raise ModelSourceError(SourceFailure.UNREACHABLE, f"cannot reach {_endpoint()} for {repo}: {exc}") from None
        raise


def _http_failure(repo: str, exc: Any) -> ModelSourceError:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401:
        return ModelSourceError(SourceFailure.UNAUTHORIZED, f"the hub refused the token for {repo} (HTTP 401): "
                                "check HF_TOKEN")  # fmt: skip
    if status == 403:
        return ModelSourceError(SourceFailure.UNAUTHORIZED, f"the token has no permission to read {repo} "
                                "(HTTP 403): give it read access")  # fmt: skip
    return ModelSourceError(SourceFailure.UNREACHABLE, f"the hub failed for {repo} (HTTP {status}): {exc}")


def _is_transport_error(exc: Exception) -> bool:
    """A connection or timeout error of the hub client's HTTP library (httpx or its successors)."""
    return type(exc).__module__.split(".")[0].startswith(("httpx", "httpcore")) or isinstance(exc, ConnectionError)
