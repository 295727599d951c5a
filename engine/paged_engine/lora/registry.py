"""Which adapters are loaded, in which weight slot, under which prefix-cache id (pure policy, no torch).

Invariants:

- A name maps to at most one loaded adapter, and a slot holds at most one adapter; at most ``max_loras`` load.
- Every load gets a fresh ``cache_id`` (``name#serial``), never reused in this process: KV computed under an
  adapter that was unloaded (or replaced under the same name) can never be served to a later load.
- A refused load or unload changes nothing.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

# Adapter names are model names in the OpenAI API and label values in Prometheus: keep them plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")


class LoraError(ValueError):
    """An adapter cannot be loaded or unloaded; ``status`` is the HTTP status the admin API answers with and
    ``param`` the request field at fault (``name`` or ``path``), which the message names."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass(frozen=True)
class LoraModule:
    """An adapter to load at start-up: ``--lora-modules NAME=PATH``."""

    name: str
    path: str


def parse_lora_module(value: str | LoraModule) -> LoraModule:
    """``NAME=PATH`` (the CLI's and ``LLM(lora_modules=[...])``'s form) into a :class:`LoraModule`."""
    if isinstance(value, LoraModule):
        return value
    name, sep, path = str(value).partition("=")
    if not sep or not name or not path:
        raise ValueError(f"lora module {value!r}: expected NAME=PATH (e.g. sql=/models/sql-lora)")
    check_name(name)
    return LoraModule(name, path)


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise LoraError(
            param="name",
            message=f"adapter name {name!r} is invalid: 1-128 characters of letters, digits and . _ : / -, "
            "starting with a letter or digit",
        )


@dataclass(frozen=True)
class LoadedLora:
    name: str
    path: str
    rank: int
    slot: int
    cache_id: str


class LoraRegistry:
    def __init__(self, max_loras: int, max_rank: int) -> None:
        self.max_loras = max_loras
        self.max_rank = max_rank
        self._by_name: dict[str, LoadedLora] = {}
        self._serial = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> LoadedLora | None:
        return self._by_name.get(name)

    def loaded(self) -> list[LoadedLora]:
        return sorted(self._by_name.values(), key=lambda lora: lora.slot)

    def check_load(self, name: str, rank: int) -> int:
        """The slot a load of ``name`` at ``rank`` would take; raises :class:`LoraError` naming the limit."""
        check_name(name)
        if name in self._by_name:
            raise LoraError(f"an adapter named {name!r} is already loaded; unload it first", 409, "name")
        if rank > self.max_rank:
            raise LoraError(f"path: the adapter has rank {rank}, above max_lora_rank={self.max_rank}", param="path")
        used = {lora.slot for lora in self._by_name.values()}
        free = next((slot for slot in range(self.max_loras) if slot not in used), None)
        if free is None:
            raise LoraError(f"all {self.max_loras} adapter slots are in use (max_loras); unload one first", status=409)
        return free

    def add(self, name: str, path: str, rank: int) -> LoadedLora:
        slot = self.check_load(name, rank)
        lora = LoadedLora(name, path, rank, slot, f"{name}#{next(self._serial)}")
        self._by_name[name] = lora
        return lora

    def remove(self, name: str) -> LoadedLora:
        lora = self._by_name.pop(name, None)
        if lora is None:
            raise LoraError(f"no adapter named {name!r} is loaded", 404, "name")
        return lora
