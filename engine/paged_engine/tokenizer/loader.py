"""``load_tokenizer``: one entry point for Hugging Face folders and GGUF files.

A GGUF's tokenizer is converted once (a few seconds for a 262,144-token vocabulary) into a Hugging Face
folder under the cache directory, keyed by the file's path, size, modification time and the converter
version; later loads read that folder, which takes well under a second.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from paged_engine.cache_home import cache_home
from paged_engine.tokenizer.chat_template import builtin_template, read_template_override
from paged_engine.tokenizer.gguf_convert import TOKENIZER_ARRAYS, convert_gguf_tokenizer
from paged_engine.tokenizer.gguf_metadata import read_gguf_metadata
from paged_engine.tokenizer.hf_folder import load_hf_tokenizer
from paged_engine.tokenizer.tokenizer import FastTokenizer

# Bump when the conversion's output changes, so stale cached tokenizers are not reused.
CONVERSION_VERSION = 1


def default_cache_dir() -> Path:
    return cache_home() / "tokenizers"


def load_tokenizer(
    path: str | Path, *, chat_template: str | Path | None = None, cache_dir: str | Path | None = None
) -> FastTokenizer:
    """Load from a folder holding ``tokenizer.json``, a ``.gguf`` file, or a folder holding one ``.gguf``.

    ``chat_template`` (a file path or the template text) overrides the model's own template.
    """
    path = Path(path)
    override = read_template_override(chat_template) if chat_template is not None else None
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return load_hf_tokenizer(path, override)
    gguf = _find_gguf(path)
    folder = gguf_tokenizer_folder(gguf, Path(cache_dir) if cache_dir is not None else default_cache_dir())
    tokenizer = load_hf_tokenizer(folder, override)
    tokenizer.name = str(gguf)
    return tokenizer


def _find_gguf(path: Path) -> Path:
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path} is neither a .gguf file nor a folder with tokenizer.json")
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer path {path} does not exist")
    candidates = sorted(path.glob("*.gguf"))
    if len(candidates) != 1:
        raise ValueError(
            f"{path} has no tokenizer.json and {len(candidates)} .gguf files; expected exactly one "
            "(pass the .gguf file itself)"
        )
    return candidates[0]


def gguf_tokenizer_folder(gguf: Path, cache_dir: Path) -> Path:
    """The cached Hugging Face folder for ``gguf``'s tokenizer, converting on a miss."""
    stat = gguf.stat()
    identity = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|v{CONVERSION_VERSION}"
    folder = cache_dir / f"{gguf.stem}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    if (folder / "tokenizer.json").is_file():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache_dir))
    try:
        write_gguf_tokenizer_folder(gguf, staging)
        try:
            staging.rename(folder)  # atomic: readers never see a half-written folder
        except OSError:
            if not (folder / "tokenizer.json").is_file():  # not a concurrent writer winning the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def write_gguf_tokenizer_folder(gguf: Path, folder: Path) -> None:
    """Convert ``gguf``'s tokenizer and write it as ``tokenizer.json`` + config files into ``folder``."""
    metadata = read_gguf_metadata(gguf, TOKENIZER_ARRAYS)
    converted = convert_gguf_tokenizer(metadata)
    template = converted.chat_template or builtin_template(str(metadata.get("general.architecture", "")))
    config = {
        **converted.special_tokens,
        "add_bos_token": converted.add_bos_token,
        "add_eos_token": converted.add_eos_token,
        **({"chat_template": template} if template else {}),
    }
    converted.tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": converted.eos_token_ids}, indent=2), encoding="utf-8"
    )
