"""KV-cache memory: how a budget is written, and what unset means on each kind of device.

A budget is a size in bytes or a fraction of the device's free memory once the weights are loaded:

* a size: a Kubernetes quantity (``2Gi``, ``512Mi``, ``1.5G``), a byte count (``2147483648``), or the engine's
  older spelling (``2GiB``, ``512MiB``, ``2GB``, any case);
* a fraction: a number in (0, 1] without a unit (``0.9``; in a ModelDeployment quoted, ``"0.9"``, since the field
  also takes integers).

A unitless number up to 1 is a fraction, a larger one bytes. Unset, the engine sizes it for its device: a fraction
of free memory on a GPU, which the engine has to itself; a fixed size on a CPU, whose free memory is the host's.
"""

from __future__ import annotations

import re

DEFAULT_GPU_FRACTION = 0.9
DEFAULT_CPU_BYTES = 2 << 30
DEFAULT_DESCRIPTION = f"{DEFAULT_GPU_FRACTION} of free memory on a GPU, {DEFAULT_CPU_BYTES >> 30}Gi on a CPU"
MAX_TEXT_LENGTH = 32

_K8S_UNITS = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_ENGINE_UNITS = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_NONZERO = r"([1-9][0-9]*(\.[0-9]+)?|0?\.[0-9]*[1-9][0-9]*)"
# The forms a ModelDeployment may write (the Kubernetes ones): a fraction, a quantity with a unit, or bytes.
KV_CACHE_MEMORY_PATTERN = rf"^(0?\.[0-9]*[1-9][0-9]*|1(\.0+)?|{_NONZERO}({'|'.join(_K8S_UNITS)})|[1-9][0-9]*)$"
_TEXT = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+([eE][0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*$")
_USAGE = "give a size (like 2Gi, 512Mi or a byte count) or a fraction of the device's free memory in (0, 1] (like 0.9)"


def parse_kv_cache_memory(value: str | int | float) -> int | float:
    """Bytes (``int``) or a fraction of free memory (``float`` in (0, 1]); ``ValueError`` naming the forms."""
    if isinstance(value, bool):
        raise ValueError(f"invalid KV-cache memory {value!r}: {_USAGE}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        match = _TEXT.match(value)
        if match is None:
            raise ValueError(f"invalid KV-cache memory {value!r}: {_USAGE}")
        number, unit = float(match["number"]), match["unit"]
    if unit:
        factor = _K8S_UNITS.get(unit) or _ENGINE_UNITS.get(unit.lower())
        if factor is None:
            hint = " (in Kubernetes, m is milli: write M or Mi)" if unit == "m" else ""
            raise ValueError(f"invalid KV-cache memory {value!r}: unknown unit {unit!r}{hint}; {_USAGE}")
        number *= factor
    elif 0 < number <= 1:
        return number
    if number < 2:
        raise ValueError(f"invalid KV-cache memory {value!r}: {_USAGE}")
    return int(number)


def default_kv_cache_memory(device_type: str) -> int | float:
    """The budget when none is given: a fraction of free memory on a GPU, a fixed size on a CPU."""
    return DEFAULT_GPU_FRACTION if device_type == "cuda" else DEFAULT_CPU_BYTES
