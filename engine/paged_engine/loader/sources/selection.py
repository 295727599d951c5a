"""Which files of a repo or bucket serving needs, and whether they fit on disk. Pure.

Serving needs the top-level safetensors shards (and their index), ``config.json``, the generation config and the
tokenizer files; everything else in a repo (``.bin``/``.pt`` duplicates, ``original/`` checkpoints, ONNX, GGUF
variants, READMEs) is skipped, which is most of the bytes for many repos.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure

SERVING_PATTERNS = (
    "*.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
_OTHER_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.gguf", "*.onnx", "*.h5", "*.msgpack")
#: Room kept free beyond the files themselves (filesystem overhead, the tokenizer cache).
DISK_MARGIN_BYTES = 64 << 20


def serving_files(names: Iterable[str], where: str) -> list[str]:
    """The files of ``names`` (paths relative to the repo or prefix) that serving needs, sorted.

    A source without top-level ``*.safetensors`` or without ``config.json`` is refused, naming what it has.
    """
    top = sorted(n for n in set(names) if "/" not in n)
    chosen = [n for n in top if any(fnmatch.fnmatch(n, p) for p in SERVING_PATTERNS)]
    if not any(n.endswith(".safetensors") for n in chosen):
        others = sorted({p for n in top for p in _OTHER_WEIGHTS if fnmatch.fnmatch(n, p)})
        found = f"it has only {', '.join(others)} weights" if others else "it has no weight files at its top level"
        raise ModelSourceError(
            SourceFailure.NO_SAFETENSORS,
            f"{where} has no *.safetensors weights ({found}); the engine loads safetensors only: convert the "
            "checkpoint (transformers' save_pretrained(safe_serialization=True)) or pick a repo that has them",
        )
    if "config.json" not in chosen:
        raise ModelSourceError(SourceFailure.NO_SAFETENSORS, f"{where} has safetensors but no config.json")
    return chosen


def missing_bytes(sizes: Mapping[str, int | None], have: Mapping[str, int]) -> int | None:
    """Bytes still to download (files partly or wholly absent); None when a size is unknown."""
    total = 0
    for name, size in sizes.items():
        if size is None:
            return None
        total += max(0, size - have.get(name, 0))
    return total


def check_space(needed: int | None, free: int, where: str) -> None:
    """Refuses a download that cannot fit, before a byte is written; unknown sizes are not checked here."""
    if needed is not None and needed + DISK_MARGIN_BYTES > free:
        raise ModelSourceError(
            SourceFailure.DISK_FULL,
            f"not enough space in {where}: the model needs {_gib(needed)} more, {_gib(free)} is free "
            f"(keep {_gib(DISK_MARGIN_BYTES)} spare); use a larger cache volume",
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
