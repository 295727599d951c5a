"""The one error a model source raises, with a machine-readable reason.

The reason is a CamelCase word (``ModelGated``, ``ModelNotFound``, ...) that ``paged-engine download`` writes to
its termination message, so the operator can show it in the ``ModelReady`` condition without parsing prose.
"""

from __future__ import annotations

from enum import StrEnum

from paged_engine.loader.hf import ModelLoadError


class SourceFailure(StrEnum):
    GATED = "ModelGated"
    """The repo needs accepted terms and a token with access (HTTP 401/403 with a gate)."""
    UNAUTHORIZED = "ModelUnauthorized"
    """The credentials were refused (a bad token, S3 access denied)."""
    NOT_FOUND = "ModelNotFound"
    """No such repo, revision, bucket or prefix."""
    NO_SAFETENSORS = "NoSafetensors"
    """The source holds no ``*.safetensors`` weights (only ``.bin``, ``.pt`` or nothing)."""
    DISK_FULL = "DiskFull"
    """The cache volume has no room for the files."""
    OFFLINE = "OfflineNotCached"
    """Downloads are disabled (``HF_HUB_OFFLINE``) and the model is not in the cache."""
    UNREACHABLE = "SourceUnreachable"
    """The hub or the S3 endpoint could not be reached, or answered with a server error."""
    INVALID = "InvalidSource"
    """The source text itself is malformed."""


class ModelSourceError(ModelLoadError):
    """A model could not be fetched; ``reason`` says why in one word, the message says what to do."""

    def __init__(self, reason: SourceFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def termination_message(self) -> str:
        """``Reason: message``: what an init container leaves for the operator."""
        return f"{self.reason.value}: {self}"
