"""Which executor an engine runs: in-process for world size 1, one worker process per rank above it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from paged_engine.engine.config import EngineConfig
from paged_engine.executor.in_process import InProcessExecutor
from paged_engine.executor.multiproc import MultiprocExecutor


def make_executor(
    config: EngineConfig, model_folder: Path, *, serving: bool, load_tokenizer: Callable[[], Any]
) -> InProcessExecutor | MultiprocExecutor:
    if config.world_size == 1:
        return InProcessExecutor(config, model_folder, serving=serving, load_tokenizer=load_tokenizer)
    return MultiprocExecutor(config, model_folder, serving=serving)
