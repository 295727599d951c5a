"""The LoRA registry's policy: names, slots, rank limit, fresh cache ids; refusals change nothing."""

from __future__ import annotations

import pytest
from paged_engine.lora.registry import LoraError, LoraModule, LoraRegistry, parse_lora_module


def test_slots_are_reused_and_cache_ids_are_not():
    registry = LoraRegistry(max_loras=2, max_rank=8)
    a = registry.add("a", "/a", 4)
    b = registry.add("b", "/b", 8)
    assert (a.slot, b.slot) == (0, 1)
    registry.remove("a")
    again = registry.add("a", "/a", 4)
    assert again.slot == 0 and again.cache_id != a.cache_id
    assert [x.name for x in registry.loaded()] == ["a", "b"]


@pytest.mark.parametrize(
    ("name", "rank", "status", "message"),
    [
        ("a", 4, 409, "already loaded"),
        ("c", 16, 400, "rank 16, above max_lora_rank=8"),
        ("bad name", 4, 400, "is invalid"),
    ],
)
def test_refusals_name_the_limit_and_change_nothing(name, rank, status, message):
    registry = LoraRegistry(max_loras=3, max_rank=8)
    registry.add("a", "/a", 4)
    with pytest.raises(LoraError, match=message) as info:
        registry.add(name, "/x", rank)
    assert info.value.status == status
    assert info.value.param in str(info.value)  # the field at fault (name or path) is named
    assert [x.name for x in registry.loaded()] == ["a"]


def test_full_slots_and_unknown_names():
    registry = LoraRegistry(max_loras=1, max_rank=8)
    registry.add("a", "/a", 4)
    with pytest.raises(LoraError, match="all 1 adapter slots are in use") as full:
        registry.add("b", "/b", 4)
    assert full.value.status == 409
    with pytest.raises(LoraError, match="no adapter named 'b'") as missing:
        registry.remove("b")
    assert missing.value.status == 404


def test_parse_lora_module():
    assert parse_lora_module("sql=/models/sql=v2") == LoraModule("sql", "/models/sql=v2")
    for bad in ("sql", "=/p", "sql="):
        with pytest.raises(ValueError, match="expected NAME=PATH"):
            parse_lora_module(bad)
