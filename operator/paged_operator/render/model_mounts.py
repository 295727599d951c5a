"""Pure: how a ModelDeployment's model reaches its engine pods, one rendering per source.

* ``path``: the claim is mounted read-only at ``/models``; the engine serves ``/models/<path>``.
* ``image``: an image volume (Kubernetes >= 1.31) mounted read-only at ``/models``.
* ``huggingFace``, ``s3``: an init container runs ``paged-engine download SOURCE --dest DIR`` into the cache
  volume (a claim shared by the replicas, or an emptyDir per pod), then the engine serves ``DIR`` read-only.
  ``DIR`` names the source and revision, so two revisions on one claim never share a folder, and a replica
  started later finds the folder complete and skips the download (the download is atomic: see
  ``paged_engine.loader.sources``). A failed download ends the init container with ``Reason: message`` in its
  termination message, which ``model_status`` turns into the ``ModelReady`` condition.
* the built-in default: nothing to mount.

Every relative path was checked by the API types to have no ``..`` segment; ``inside`` checks again after
normalisation, so no rendering can point outside its mount whatever the input.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from paged_platform.api import HuggingFaceModel, ImageModel, ModelDeployment, PathModel, S3Model
from paged_platform.engine_contract.launch import DOWNLOAD, DownloadFlag

MODEL_VOLUME = "model"
CACHE_VOLUME = "model-cache"
MODEL_MOUNT = "/models"
CACHE_MOUNT = "/model-cache"
DOWNLOAD_CONTAINER = "model-download"
TERMINATION_LOG = "/dev/termination-log"


@dataclass(frozen=True)
class ModelMounts:
    """What the pod needs for its model: volumes, the engine's mounts and model argument, an init container."""

    model_arg: str
    volumes: list[dict[str, Any]] = field(default_factory=list)
    engine_mounts: list[dict[str, Any]] = field(default_factory=list)
    download: DownloadStep | None = None


@dataclass(frozen=True)
class DownloadStep:
    """The init container's arguments, environment and mount (the caller adds image, security and resources)."""

    args: list[str]
    env: list[dict[str, Any]]
    env_from: list[dict[str, Any]]
    mount: dict[str, Any]


def inside(mount: str, relative: str) -> str:
    """``mount/relative`` normalised; refuses a result outside ``mount`` (the API types already refuse ``..``)."""
    joined = posixpath.normpath(posixpath.join(mount, relative)) if relative else mount
    if joined != mount and not joined.startswith(mount + "/"):
        raise ValueError(f"model path {relative!r} leaves its mount {mount}")
    return joined


def _flat(text: str) -> str:
    """One folder name for a repo id, revision or prefix (``/`` would nest folders)."""
    return text.strip("/").replace("/", "--") or "_"


def download_dir(source: HuggingFaceModel | S3Model, root: str = CACHE_MOUNT) -> str:
    if isinstance(source, HuggingFaceModel):
        return inside(root, f"hub/{_flat(source.id)}/{_flat(source.revision)}")
    bucket, _, prefix = source.uri.removeprefix("s3://").partition("/")
    return inside(root, f"s3/{bucket}/{_flat(prefix)}")


def _cache_volume(md: ModelDeployment) -> dict[str, Any]:
    cache = md.spec.model.resolved_cache()
    if cache.claim_name is not None:
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache.claim_name}}
    empty: dict[str, Any] = {}
    if cache.size_limit is not None:
        empty["sizeLimit"] = str(cache.size_limit)
    return {"name": CACHE_VOLUME, "emptyDir": empty}


def download_step(
    source: HuggingFaceModel | S3Model, dest: str, volume: str = CACHE_VOLUME, mount_path: str = CACHE_MOUNT
) -> DownloadStep:
    """``paged-engine download`` of ``source`` into ``dest``, on ``volume`` mounted at ``mount_path``."""
    env: list[dict[str, Any]] = []
    env_from: list[dict[str, Any]] = []
    if isinstance(source, HuggingFaceModel):
        args = [DOWNLOAD, source.id, DownloadFlag.REVISION, source.revision]
        if source.token_secret_ref is not None:
            ref = source.token_secret_ref
            env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
        if source.endpoint is not None:
            env.append({"name": "HF_ENDPOINT", "value": source.endpoint})
        env.append({"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"})
    else:
        args = [DOWNLOAD, source.uri]
        if source.endpoint is not None:
            env.append({"name": "AWS_ENDPOINT_URL", "value": source.endpoint})
        if source.region is not None:
            env.append({"name": "AWS_DEFAULT_REGION", "value": source.region})
        if source.credentials_secret_ref is not None:
            env_from.append({"secretRef": {"name": source.credentials_secret_ref.name}})
    args += [DownloadFlag.DEST, dest, DownloadFlag.TERMINATION_LOG, TERMINATION_LOG]
    return DownloadStep(args, env, env_from, {"name": volume, "mountPath": mount_path})


def model_mounts(md: ModelDeployment) -> ModelMounts:
    source = md.spec.model.resolved()
    if isinstance(source, PathModel):
        volume = {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True}}
        mount = {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}
        return ModelMounts(inside(MODEL_MOUNT, source.path), [volume], [mount])
    if isinstance(source, ImageModel):
        volume = {"name": MODEL_VOLUME, "image": {"reference": source.reference, "pullPolicy": source.pull_policy}}
        mount = {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}
        return ModelMounts(inside(MODEL_MOUNT, source.path), [volume], [mount])
    if isinstance(source, HuggingFaceModel | S3Model):
        dest = download_dir(source)
        mount = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True}
        return ModelMounts(dest, [_cache_volume(md)], [mount], download_step(source, dest))
    return ModelMounts("default")
