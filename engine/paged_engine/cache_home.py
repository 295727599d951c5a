"""The engine's cache folder: ``$PAGED_CACHE``, else ``~/.cache/paged``.

Everything the engine writes for later starts lives under it: converted models and downloads (``models/``),
converted tokenizers (``tokenizers/``), compiled kernels (``torch_extensions/``). ``PAGED_CACHE_DIR`` is the older
name of the same folder for the model and tokenizer caches: it still works, with a deprecation warning, and
``PAGED_CACHE`` wins when both are set.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

VARIABLE = "PAGED_CACHE"
DEPRECATED_VARIABLE = "PAGED_CACHE_DIR"


def cache_home() -> Path:
    """The cache folder, read from the environment at each call (tests and the CLI set it late)."""
    current, old = os.environ.get(VARIABLE), os.environ.get(DEPRECATED_VARIABLE)
    if old:
        _warn_deprecated(old, current or "")
    return Path(current or old or Path.home() / ".cache" / "paged")


@functools.cache
def _warn_deprecated(old: str, current: str) -> None:
    if current and current != old:
        logger.warning("%s=%s is ignored: %s=%s is set (%s is deprecated; drop it)", DEPRECATED_VARIABLE, old,
                       VARIABLE, current, DEPRECATED_VARIABLE)  # fmt: skip
    else:
        logger.warning("%s is deprecated: set %s=%s instead", DEPRECATED_VARIABLE, VARIABLE, old)
