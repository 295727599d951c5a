"""S3 downloads through boto3, which takes the endpoint (``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``), the
region and the credentials (``AWS_ACCESS_KEY_ID``..., a profile, or an IAM role) from the environment as usual.

The objects directly under the prefix are listed; the serving files among them are downloaded with the transfer
manager (multipart, parallel) into the staging folder and published. S3 has no revision: the folder is named by a
digest of the keys, sizes and ETags, so changed objects land in a new folder and an unchanged prefix is reused.
A file already whole in the staging folder (an earlier attempt) is not fetched again; anything else there (the
transfer manager's temporary files left by a killed attempt, files no longer listed) is removed first, so only
whole files of this listing are ever published.
"""

from __future__ import annotations

import errno
import hashlib
import logging
from pathlib import Path
from typing import Any

from paged_engine.loader.sources import cache, selection
from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure
from paged_engine.loader.sources.spec import S3Source

logger = logging.getLogger(__name__)


def client() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise ModelSourceError(SourceFailure.INVALID, "s3:// sources need boto3 (pip install boto3)") from exc
    return boto3.client("s3")


def listing(s3: Any, source: S3Source) -> dict[str, tuple[int, str]]:
    """``{file name: (size, etag)}`` of the objects directly under the prefix."""
    out: dict[str, tuple[int, str]] = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=source.prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(source.prefix) :]
                if name and "/" not in name:
                    out[name] = (int(obj["Size"]), str(obj.get("ETag", "")))
    except Exception as exc:
        raise _mapped(source, exc) from None
    if not out:
        raise ModelSourceError(SourceFailure.NOT_FOUND, f"no objects under {source}")
    return out


def digest(files: dict[str, tuple[int, str]]) -> str:
    text = "\n".join(f"{name} {size} {etag}" for name, (size, etag) in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(s3: Any, source: S3Source) -> tuple[str, dict[str, tuple[int, str]]]:
    """``(digest, {file: (size, etag)})`` of the serving files under the prefix."""
    objects = listing(s3, source)
    names = selection.serving_files(objects, str(source))
    files = {n: objects[n] for n in names}
    return digest(files), files


def download(
    s3: Any, source: S3Source, version: str, files: dict[str, tuple[int, str]], place: cache.Placement
) -> Path:
    staging = place.staging
    sizes = {n: size for n, (size, _) in files.items()}
    _remove_leftovers(staging, keep=sizes)
    have = cache.file_sizes(staging)
    selection.check_space(selection.missing_bytes(sizes, have), cache.free_bytes(staging), str(place.final.parent))
    staging.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %d files (%.1f MiB) from %s into %s", len(files), sum(sizes.values()) / 2**20, source,
                place.final)  # fmt: skip
    for name, size in sizes.items():
        if have.get(name) == size:
            continue
        part = staging / f".{name}.part"
        try:
            s3.download_file(source.bucket, source.prefix + name, str(part))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                cache.discard(place)
                raise ModelSourceError(SourceFailure.DISK_FULL, f"no space left on the device while downloading "
                                       f"{source}{name}: use a larger volume") from None  # fmt: skip
            raise
        except Exception as exc:
            if _is_disk_full(exc):
                cache.discard(place)
                raise ModelSourceError(SourceFailure.DISK_FULL, f"no space left on the device while downloading "
                                       f"{source}{name}: use a larger volume") from None  # fmt: skip
            raise _mapped(source, exc) from None
        part.rename(staging / name)
        logger.info("downloaded %s (%.1f MiB)", name, size / 2**20)
    record = {"source": "s3", "uri": str(source), "version": version,
              "files": {n: {"size": s, "etag": e} for n, (s, e) in files.items()}}  # fmt: skip
    return cache.publish(place, record)


def _remove_leftovers(staging: Path, keep: dict[str, int]) -> None:
    """Removes what is not a whole file of the listing: a killed attempt's ``.NAME.part*`` files (boto3 writes to
    a temporary name, then renames) or a file of the wrong size."""
    for file, size in cache.file_sizes(staging).items():
        if keep.get(file) != size:
            logger.info("removing %s, left by an earlier attempt", staging / file)
            (staging / file).unlink(missing_ok=True)


def _is_disk_full(exc: BaseException) -> bool:
    """boto3's transfer manager wraps the write error; look down the chain for ENOSPC."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return "No space left on device" in str(exc)


def _mapped(source: S3Source, exc: Exception) -> ModelSourceError:
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    if isinstance(exc, NoCredentialsError):
        return ModelSourceError(SourceFailure.UNAUTHORIZED, f"no S3 credentials for {source}: set "
                                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or a role)")  # fmt: skip
    if isinstance(exc, EndpointConnectionError):
        return ModelSourceError(SourceFailure.UNREACHABLE, f"cannot reach the S3 endpoint for {source}: {exc}")
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("NoSuchBucket", "NoSuchKey", "404") or status == 404:
            return ModelSourceError(SourceFailure.NOT_FOUND, f"{source}: {code or 'not found'}")
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403") or status in (401, 403):
            return ModelSourceError(SourceFailure.UNAUTHORIZED, f"S3 refused access to {source} ({code}): check "
                                    "the credentials and the bucket policy")  # fmt: skip
        return ModelSourceError(SourceFailure.UNREACHABLE, f"S3 failed for {source} ({code}, HTTP {status})")
    return ModelSourceError(SourceFailure.UNREACHABLE, f"S3 failed for {source}: {exc}")
