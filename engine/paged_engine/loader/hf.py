"""Load a Hugging Face model folder: ``config.json`` plus ``*.safetensors`` shards (tokenizer files are read by
:mod:`paged_engine.tokenizer`).

Shards are memory-mapped and copied tensor by tensor into the model, so peak memory stays close to one copy of
the weights. Progress is logged per shard with sizes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from paged_engine.models.decoder import DecoderForCausalLM
from paged_engine.models.registry import build_model

logger = logging.getLogger(__name__)


class ModelLoadError(RuntimeError):
    """A model folder or file is missing, incomplete or corrupt; the message names the path."""


def load_hf_config(folder: str | Path) -> Any:
    """The transformers config of ``folder``; a missing ``config.json`` is an error naming the path."""
    from transformers import AutoConfig

    path = Path(folder)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"model config not found: {config_file}")
    try:
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read model config {config_file}: {exc}") from exc


def safetensors_files(folder: str | Path) -> list[Path]:
    path = Path(folder)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no *.safetensors weight files in {path}")
    return files


def iter_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` from every shard, logging each shard's size as it is read."""
    for index, file in enumerate(files, 1):
        size_mib = file.stat().st_size / 2**20
        logger.info("loading weights %d/%d: %s (%.1f MiB)", index, len(files), file.name, size_mib)
        try:
            with safe_open(str(file), framework="pt") as shard:
                for name in shard.keys():  # noqa: SIM118 - safe_open handles are not iterable
                    yield name, shard.get_tensor(name)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read weights from {file}: {exc}") from exc


def load_hf_model(
    folder: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    rank: int = 0,
    tp_size: int = 1,
    pp_size: int = 1,
) -> tuple[DecoderForCausalLM, Any]:
    """Build the model named by ``folder/config.json`` (rank ``rank``'s share of it under tensor and pipeline
    parallelism) and fill it from the folder's safetensors shards."""
    start = time.perf_counter()
    files = safetensors_files(folder)
    config = load_hf_config(folder)
    model = build_model(config, dtype=dtype, device=device, rank=rank, tp_size=tp_size, pp_size=pp_size)
    try:
        model.load_weights(iter_safetensors(files))
    except ValueError as exc:
        raise ModelLoadError(f"{folder}: {exc}") from exc
    num_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "loaded %s (%.1f M parameters, %s) from %s in %.1f s",
        model.spec.architecture,
        num_params / 1e6,
        str(dtype).removeprefix("torch."),
        folder,
        time.perf_counter() - start,
    )
    return model, config
