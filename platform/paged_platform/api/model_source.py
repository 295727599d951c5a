"""`spec.model`: where the weights come from, as a union of sources, plus the older `name`/`volume` form.

Exactly one of `huggingFace`, `s3`, `path` and `image` may be given; none means the older form, where `name`
is `default` (the built-in model), a Hugging Face id or an absolute path under `volume.mountPath`. The older form
keeps working unchanged: :meth:`ModelSource.resolved` reads it as the equivalent new source, so the operator
renders only one shape.

Downloaded sources (`huggingFace`, `s3`) are fetched by an init container into `cache` (a PersistentVolumeClaim
shared by the replicas, or an emptyDir per pod), so the engine starts from a local folder. Paths inside a volume
or an image are relative and must stay under it: `..` segments are refused.
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import Field

from paged_platform.api.base import ApiModel, Quantity, cel

DEFAULT_MODEL = "default"
DEFAULT_MODEL_SERVED_NAME = "gemma-3-270m"

# A Hugging Face-style id ("org/name"), the built-in default, or an absolute path inside model.volume.
MODEL_NAME_PATTERN = r"^(default|/[^\s]+|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+)$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
# An absolute directory without a trailing slash ("/models"), so "<mountPath>/" prefixes the files under it.
MOUNT_PATH_PATTERN = r"^(/[^/\s]+)+$"
REPO_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$"
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"
URL_PATTERN = r"^https?://[^\s/]+(/[^\s]*)?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# A relative path inside a volume or an image ("" is its root); no leading "/".
RELATIVE_PATH_PATTERN = r"^([^/\s][^\s]*)?$"
#: A `..` segment anywhere: after normalisation the path could leave its mount.
DOTDOT = r"(^|/)[.][.](/|$)"
_DOTDOT_RE = re.compile(DOTDOT)


def escapes(path: str) -> bool:
    """True when ``path`` has a ``..`` segment (the CEL rules use the same expression)."""
    return bool(_DOTDOT_RE.search(path))


class SecretKeyRef(ApiModel):
    """One key of a Secret in the ModelDeployment's namespace."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    key: str = Field(max_length=253, pattern=SECRET_KEY_PATTERN)


class SecretRef(ApiModel):
    """A whole Secret in the ModelDeployment's namespace, its keys becoming environment variables."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)


class HuggingFaceModel(ApiModel):
    """A model repo on the Hugging Face hub (or a mirror that speaks its API)."""

    id: str = Field(max_length=193, pattern=REPO_ID_PATTERN)
    """The repo id, like `Qwen/Qwen2.5-0.5B-Instruct`."""
    revision: str = Field("main", max_length=256, pattern=REVISION_PATTERN)
    """Branch, tag or commit sha. A branch is resolved to its commit once, by the first download into the cache;
    pin a commit sha to know exactly what every replica serves."""
    token_secret_ref: SecretKeyRef | None = None
    """The Secret key holding an access token (`HF_TOKEN`): needed for gated and private models."""
    endpoint: str | None = Field(None, max_length=1024, pattern=URL_PATTERN)
    """The hub's base URL (`HF_ENDPOINT`); unset means huggingface.co."""

    @cel("!self.revision.matches('" + DOTDOT + "')", "model.huggingFace.revision must not contain '..' segments",
         field_path=".revision")  # fmt: skip
    def _revision_plain(self) -> bool:
        return not escapes(self.revision)


class S3Model(ApiModel):
    """A folder of an S3 bucket (or of any store that speaks the S3 API) holding the model's files."""

    uri: str = Field(max_length=1024, pattern=S3_URI_PATTERN)
    """`s3://BUCKET/PREFIX`: the objects directly under the prefix are the model folder."""
    endpoint: str | None = Field(None, max_length=1024, pattern=URL_PATTERN)
    """The S3 API endpoint (`AWS_ENDPOINT_URL`), for MinIO, Ceph, GCS or R2; unset means AWS."""
    region: str | None = Field(None, max_length=64, pattern=r"^[a-z0-9-]+$")
    credentials_secret_ref: SecretRef | None = None
    """A Secret whose keys are AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, ...), passed to the
    download as environment; unset means the pod's own identity (IRSA, workload identity)."""

    @cel("!self.uri.matches('" + DOTDOT + "')", "model.s3.uri must not contain '..' segments", field_path=".uri")
    def _uri_plain(self) -> bool:
        return not escapes(self.uri)


class PathModel(ApiModel):
    """A model folder (or `.gguf` file) already on a PersistentVolumeClaim, mounted read-only."""

    claim_name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    path: str = Field("", max_length=1024, pattern=RELATIVE_PATH_PATTERN)
    """Where the model is inside the claim, relative to its root (`""` is the root itself)."""

    @cel("!self.path.matches('" + DOTDOT + "')",
         "model.path.path must stay inside the volume: '..' segments are refused", field_path=".path")  # fmt: skip
    def _inside(self) -> bool:
        return not escapes(self.path)


class ImageModel(ApiModel):
    """An OCI image holding the model's files, mounted read-only as a Kubernetes image volume."""

    reference: str = Field(min_length=1, max_length=512)
    """The image, like `registry.example.com/models/llama-3-8b:v1`."""
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    path: str = Field("", max_length=1024, pattern=RELATIVE_PATH_PATTERN)
    """Where the model is inside the image, relative to its root."""

    @cel("!self.path.matches('" + DOTDOT + "')",
         "model.image.path must stay inside the image: '..' segments are refused", field_path=".path")  # fmt: skip
    def _inside(self) -> bool:
        return not escapes(self.path)


class ModelCache(ApiModel):
    """Where a downloaded model is kept. With `claimName`, a PersistentVolumeClaim every replica mounts: the first
    pod downloads, the others find the model there. It must be ReadWriteMany (several nodes) or ReadWriteOnce
    with all replicas on one node; see docs/operator.md. Without it, each pod downloads into its own emptyDir."""

    claim_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    size_limit: Quantity | None = None
    """The emptyDir's size limit (only without `claimName`); the pod is evicted beyond it."""

    @cel("!has(self.claimName) || !has(self.sizeLimit)",
         "model.cache.sizeLimit applies to the per-pod emptyDir, not to a claim (size the claim itself)")  # fmt: skip
    def _limit_for_empty_dir(self) -> bool:
        return self.claim_name is None or self.size_limit is None


class ModelVolume(ApiModel):
    """The older form's PersistentVolumeClaim: the weights for a path model, the download cache for a Hugging
    Face id."""

    claim_name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the PersistentVolumeClaim, in the ModelDeployment's namespace."""
    mount_path: str = Field("/models", max_length=1024, pattern=MOUNT_PATH_PATTERN)
    """Where the claim is mounted in the engine container."""
    read_only: bool | None = None
    """Mount read-only; unset means read-only for a path model and writable for a Hugging Face cache."""


BuiltIn = Literal["default"]
ResolvedSource = HuggingFaceModel | S3Model | PathModel | ImageModel | BuiltIn


def describe_source(source: ResolvedSource) -> str:
    """A model or adapter source in one line for people (``paged-ctl describe``, ``status``)."""
    if isinstance(source, HuggingFaceModel):
        return f"huggingFace {source.id}@{source.revision}"
    if isinstance(source, S3Model):
        return source.uri
    if isinstance(source, PathModel):
        return f"path {source.path or '.'} on claim {source.claim_name}"
    if isinstance(source, ImageModel):
        return f"image {source.reference}" + (f" at {source.path}" if source.path else "")
    return "default"


_SOURCES = ("huggingFace", "s3", "path", "image")
_COUNT = " + ".join(f"(has(self.{s}) ? 1 : 0)" for s in _SOURCES)
_ANY = " || ".join(f"has(self.{s})" for s in _SOURCES)


class ModelSource(ApiModel):
    """The model every replica serves: one of `huggingFace`, `s3`, `path` or `image` (or the older `name`)."""

    hugging_face: HuggingFaceModel | None = None
    s3: S3Model | None = None
    path: PathModel | None = None
    image: ImageModel | None = None
    cache: ModelCache | None = None
    """Where `huggingFace` and `s3` downloads are kept (default: an emptyDir per pod)."""
    name: str = Field(DEFAULT_MODEL, max_length=1024, pattern=MODEL_NAME_PATTERN)
    """The older form: `default` (the built-in Gemma 3 270M, needs no volume), a Hugging Face id like
    `Qwen/Qwen2.5-0.5B` (read as `huggingFace.id`), or an absolute path under `volume.mountPath` (read as
    `path`)."""
    served_name: str | None = Field(None, max_length=253, pattern=SERVED_NAME_PATTERN)
    """The `model` clients send in OpenAI requests; unset means derived from the source."""
    volume: ModelVolume | None = None
    """The older form: required for a path; optional cache for a Hugging Face id (read as `cache.claimName`)."""

    @property
    def is_path(self) -> bool:
        return self.name.startswith("/")

    @property
    def is_default(self) -> bool:
        return self.resolved() == DEFAULT_MODEL

    def given(self) -> HuggingFaceModel | S3Model | PathModel | ImageModel | None:
        return self.hugging_face or self.s3 or self.path or self.image

    def resolved(self) -> ResolvedSource:
        """The source, the older form read as its new equivalent."""
        if (source := self.given()) is not None:
            return source
        if self.name == DEFAULT_MODEL:
            return DEFAULT_MODEL
        if self.is_path:
            assert self.volume is not None  # the CEL rule requires it
            return PathModel(claim_name=self.volume.claim_name, path=self.name[len(self.volume.mount_path) + 1 :])
        return HuggingFaceModel(id=self.name)

    def resolved_cache(self) -> ModelCache:
        """The download cache, the older form's `volume` read as its claim."""
        if self.cache is not None:
            return self.cache
        if self.given() is None and self.volume is not None and not self.is_path:
            return ModelCache(claim_name=self.volume.claim_name)
        return ModelCache()

    def describe(self) -> str:
        """One line for people (``paged-ctl describe``)."""
        return describe_source(self.resolved())

    @property
    def resolved_served_name(self) -> str:
        if self.served_name:
            return self.served_name
        source = self.resolved()
        if isinstance(source, HuggingFaceModel):
            return posixpath.basename(source.id)
        if isinstance(source, S3Model):
            return posixpath.basename(source.uri.rstrip("/")) or "model"
        if isinstance(source, PathModel):
            return posixpath.basename(source.path.rstrip("/")).removesuffix(".gguf") or source.claim_name
        if isinstance(source, ImageModel):
            name = posixpath.basename(source.path.rstrip("/")) or source.reference.rsplit("/", 1)[-1]
            return re.split(r"[:@]", name)[0].removesuffix(".gguf")
        return DEFAULT_MODEL_SERVED_NAME

    @cel(_COUNT + " <= 1", "give at most one of model.huggingFace, model.s3, model.path and model.image")
    def _one_source(self) -> bool:
        return sum(s is not None for s in (self.hugging_face, self.s3, self.path, self.image)) <= 1

    @cel(
        f"!({_ANY}) || (self.name == 'default' && !has(self.volume))",
        "model.name and model.volume are the older form of the model source: leave them out when giving "
        "model.huggingFace, model.s3, model.path or model.image",
    )
    def _not_both_forms(self) -> bool:
        return self.given() is None or (self.name == DEFAULT_MODEL and self.volume is None)

    @cel(
        "!has(self.cache) || has(self.huggingFace) || has(self.s3)",
        "model.cache applies to downloaded models (model.huggingFace, model.s3)",
    )
    def _cache_for_downloads(self) -> bool:
        return self.cache is None or self.hugging_face is not None or self.s3 is not None

    @cel(
        "!self.name.startsWith('/') || has(self.volume)",
        "model.name is a path, so model.volume must name the PersistentVolumeClaim that holds it",
    )
    def _path_needs_volume(self) -> bool:
        return not self.is_path or self.volume is not None

    @cel(
        "!self.name.startsWith('/') || !has(self.volume) || self.name.startsWith(self.volume.mountPath + '/')",
        "model.name must be a path under model.volume.mountPath",
    )
    def _path_under_mount(self) -> bool:
        return not self.is_path or self.volume is None or self.name.startswith(self.volume.mount_path + "/")

    @cel(
        "!self.name.matches('" + DOTDOT + "')",
        "model.name must stay under model.volume.mountPath: '..' segments are refused",
        field_path=".name",
    )
    def _name_plain(self) -> bool:
        return not escapes(self.name)

    @cel(
        "self.name != 'default' || !has(self.volume)",
        "the default model is built into the engine image and takes no model.volume",
    )
    def _default_has_no_volume(self) -> bool:
        return self.name != DEFAULT_MODEL or self.volume is None
