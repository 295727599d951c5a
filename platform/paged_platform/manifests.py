"""Read ModelDeployment manifests from YAML and validate them against the API types, with field-level errors.

Used by `paged-ctl apply` so a bad object is refused with every field path and message before it reaches
the API server (which enforces the same rules through the generated CRD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from paged_platform.api import API_VERSION, KIND, ModelDeployment


class ManifestError(Exception):
    """A manifest cannot be used; the message says why and where."""


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ManifestValidationError(ManifestError):
    """A document is a ModelDeployment but breaks the schema; ``errors`` lists every offending field."""

    def __init__(self, where: str, errors: list[FieldError]) -> None:
        super().__init__(f"{where} is invalid: " + "; ".join(str(e) for e in errors))
        self.where = where
        self.errors = errors


def load_documents(text: str, source: str) -> list[dict[str, Any]]:
    """Parse (multi-document) YAML into mappings, skipping empty documents."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"{where}: invalid YAML: {problem}") from None
    if not docs:
        raise ManifestError(f"{source}: no documents found")
    for index, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            raise ManifestError(f"{source}: document {index} is a {type(doc).__name__}, not a mapping")
    return docs


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def field_errors(exc: ValidationError) -> list[FieldError]:
    """Flatten a pydantic error into (camelCase path, message) pairs."""
    errors = []
    for err in exc.errors(include_url=False):
        message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        errors.append(FieldError(_path(err["loc"]), message))
    return errors


def validate_document(doc: dict[str, Any], where: str) -> ModelDeployment:
    """Validate one mapping as a ModelDeployment, or raise with every field error."""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if (api_version, kind) != (API_VERSION, KIND):
        raise ManifestError(f"{where} is apiVersion={api_version!r} kind={kind!r}, not {API_VERSION} {KIND}")
    try:
        return ModelDeployment.model_validate(doc)
    except ValidationError as exc:
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
        label = f"{where} ({KIND} {name})" if name else where
        raise ManifestValidationError(label, field_errors(exc)) from None


def load_model_deployments(text: str, source: str) -> list[tuple[dict[str, Any], ModelDeployment]]:
    """Every document in ``text`` as (the document as written, its validated model)."""
    docs = load_documents(text, source)
    multi = len(docs) > 1
    return [
        (doc, validate_document(doc, f"{source} document {i}" if multi else source)) for i, doc in enumerate(docs, 1)
    ]
