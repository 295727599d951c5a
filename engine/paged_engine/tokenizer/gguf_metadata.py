"""Read the key/value metadata of a GGUF file, without its tensor table or tensor data.

``gguf.GGUFReader`` builds a numpy view per array element, which takes ~25 s for Gemma's 262,144-token
vocabulary; this reader walks the header with ``struct`` over a memory map and returns numeric arrays as
numpy arrays in one read, so the tokenizer keys load in well under a second.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Container
from pathlib import Path
from typing import Any

import numpy as np

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

# GGUF value types: fixed-size scalars, plus 8 (string) and 9 (array).
_SCALAR_FORMATS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_NUMPY_DTYPES = {
    0: np.uint8,
    1: np.int8,
    2: np.uint16,
    3: np.int16,
    4: np.uint32,
    5: np.int32,
    6: np.float32,
    7: np.bool_,
    10: np.uint64,
    11: np.int64,
    12: np.float64,
}
_STRING, _ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands."""


class _Cursor:
    def __init__(self, buffer: mmap.mmap, path: Path) -> None:
        self.buffer = buffer
        self.pos = 0
        self.path = path

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buffer):
            raise GGUFFormatError(f"{self.path}: metadata runs past the end of the file at byte {self.pos}")
        values = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += size
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        length = self.unpack("<Q")
        raw = self.buffer[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.pos += 8 + self.unpack("<Q")

    def value(self, value_type: int, keep: bool) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type != _ARRAY:
            raise GGUFFormatError(f"{self.path}: unknown metadata value type {value_type} at byte {self.pos}")
        element_type, count = self.unpack("<IQ")
        if element_type in _NUMPY_DTYPES:
            dtype = np.dtype(_NUMPY_DTYPES[element_type])
            array = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos).copy() if keep else None
            self.pos += count * dtype.itemsize
            return array
        if element_type == _STRING:
            if keep:
                return [self.string() for _ in range(count)]
            for _ in range(count):
                self.skip_string()
            return None
        # Arrays of arrays exist in the format but in no tokenizer key; walk them to stay aligned.
        items = [self.value(element_type, keep) for _ in range(count)]
        return items if keep else None


def read_gguf_metadata(path: str | Path, arrays: Container[str] | None = None) -> dict[str, Any]:
    """All scalar and string metadata, plus the array-valued keys named in ``arrays`` (all when None).

    Arrays not asked for are skipped and absent from the result: they can be large (vocabularies).
    """
    path = Path(path)
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        cursor = _Cursor(buffer, path)
        if buffer[:4] != GGUF_MAGIC:
            raise GGUFFormatError(f"{path} is not a GGUF file (magic {bytes(buffer[:4])!r}, expected {GGUF_MAGIC!r})")
        cursor.pos = 4
        version = cursor.unpack("<I")
        if version not in SUPPORTED_VERSIONS:
            raise GGUFFormatError(f"{path} is GGUF version {version}; supported versions: {SUPPORTED_VERSIONS}")
        _tensor_count, kv_count = cursor.unpack("<QQ")
        metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = cursor.string()
            value_type = cursor.unpack("<I")
            keep = value_type != _ARRAY or arrays is None or key in arrays
            value = cursor.value(value_type, keep)
            if keep:
                metadata[key] = value
        return metadata
