"""What ``paged-ctl plan`` reads of a checkpoint on disk: its ``config.json`` and its safetensors headers.

Only metadata: a safetensors file opens with an 8-byte little-endian length and a JSON header naming each tensor's
dtype and shape, so the real parameter count of a folder of shards costs a few kilobytes per file, no torch and no
network.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.json"
#: A header longer than this is not a safetensors header (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000
#: Tensor dtypes of an unquantized checkpoint: one element per parameter.
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})


class CheckpointError(ValueError):
    """The path holds no readable config or safetensors header; the message says which file and why."""


@dataclass(frozen=True)
class SafetensorsTotals:
    files: int
    parameters: int  # elements of every tensor
    data_bytes: int  # their size as stored
    dtypes: frozenset[str]

    @property
    def quantized(self) -> bool:
        """Some tensors are integers or 8-bit floats (packed weights, scales): elements are not parameters."""
        return not self.dtypes <= FLOAT_DTYPES


@dataclass(frozen=True)
class Checkpoint:
    config_path: Path
    config: dict[str, Any]
    safetensors: SafetensorsTotals | None  # None: a bare config.json, or a folder without *.safetensors


def header_totals(header: Mapping[str, Any], where: str) -> tuple[int, int, set[str]]:
    """(elements, stored bytes, dtypes) of the tensors a safetensors header lists."""
    elements, stored, dtypes = 0, 0, set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            shape, (start, end), dtype = info["shape"], info["data_offsets"], info["dtype"]
            elements += math.prod(int(d) for d in shape)
            stored += int(end) - int(start)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{where}: tensor {name!r} has no dtype, shape and data_offsets") from None
        dtypes.add(str(dtype))
    return elements, stored, dtypes


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file."""
    try:
        with path.open("rb") as f:
            prefix = f.read(8)
            (length,) = struct.unpack("<Q", prefix) if len(prefix) == 8 else (0,)
            if not 0 < length <= MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: not a safetensors file (no header)")
            header = json.loads(f.read(length))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    return header


def safetensors_totals(folder: Path) -> SafetensorsTotals | None:
    """Totals over the ``*.safetensors`` files directly in ``folder`` (the shards of one checkpoint)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    elements, stored, dtypes = 0, 0, set()
    for path in files:
        e, s, d = header_totals(read_header(path), str(path))
        elements, stored, dtypes = elements + e, stored + s, dtypes | d
    return SafetensorsTotals(len(files), elements, stored, frozenset(dtypes))


def load_checkpoint(path: Path) -> Checkpoint:
    """A ``config.json``, or a model folder holding one (and, where present, its safetensors shards)."""
    config_path = path / CONFIG_NAME if path.is_dir() else path
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    if not config_path.is_file():
        raise CheckpointError(f"{path} holds no {CONFIG_NAME}")
    try:
        config = json.loads(config_path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{config_path}: cannot read it ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{config_path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: not a JSON object")
    return Checkpoint(config_path, config, safetensors_totals(path) if path.is_dir() else None)
