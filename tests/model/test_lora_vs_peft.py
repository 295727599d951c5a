"""Batched LoRA in the model runner equals PEFT + transformers greedy, per row of a batch mixing adapters."""

from __future__ import annotations

import pytest
import torch
from paged_engine.attention import get_backend
from paged_engine.loader.hf import load_hf_model
from paged_engine.lora.adapter import load_adapter
from paged_engine.lora.layers import LoraSlots
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

from tests.model.harness import run_manual
from tests.model.lora_adapters import peft_greedy, save_random_adapter
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import BLOCK_SIZE, save_tiny_model

MAX_TOKENS = 10
MAX_LEN = 128


def lora_runner(folder, adapters: dict[str, object], max_loras: int = 4, max_rank: int = 8) -> ModelRunner:
    model, _ = load_hf_model(folder)
    slots = LoraSlots(model, max_loras, max_rank, torch.float32, torch.device("cpu"))
    for slot, (cache_id, path) in enumerate(adapters.items()):
        slots.load(slot, cache_id, load_adapter(path, model.spec, torch.float32))
    plan = plan_kv_cache(model, BLOCK_SIZE, torch.float32, MAX_LEN, num_blocks=512)
    return ModelRunner(model, plan, get_backend("reference"), 16, MAX_LEN, lora=slots)


@pytest.fixture(scope="module", params=["llama", "qwen2", "gemma3"])
def setup(request, tmp_path_factory):
    """A tiny base, two adapters (all projections at rank 4; attention only at rank 8, rsLoRA) and references."""
    root = tmp_path_factory.mktemp(request.param)
    base = save_tiny_model(request.param, root / "base")
    one = save_random_adapter(base, root / "one", rank=4, alpha=8, seed=1)
    two = save_random_adapter(base, root / "two", rank=8, alpha=4, seed=2, targets=["q_proj", "v_proj", "o_proj"],
                              rslora=True)  # fmt: skip
    refs = {name: peft_greedy(base, path, prompts(), MAX_TOKENS) for name, path in [("base", None), ("one", one),
                                                                                   ("two", two)]}  # fmt: skip
    return base, {"one": one, "two": two}, refs


def test_references_differ(setup):
    """The adapters change the greedy outputs, so equality below means the LoRA delta was applied."""
    _, _, refs = setup
    assert refs["one"] != refs["base"] and refs["two"] != refs["base"] and refs["one"] != refs["two"]


@pytest.mark.parametrize("name", ["one", "two"])
def test_single_adapter_matches_peft(setup, name):
    base, adapters, refs = setup
    runner = lora_runner(base, {f"{name}#1": adapters[name]})
    got = run_manual(runner, prompts(), MAX_TOKENS, adapter_ids=[f"{name}#1"] * len(prompts()))
    assert got == refs[name]


@pytest.mark.parametrize("budget", [1000, 7])
def test_mixed_batch_matches_each_reference(setup, budget):
    """Every prompt under base, one and two in one batch (budget 7: prefill chunks mixed with decodes)."""
    base, adapters, refs = setup
    runner = lora_runner(base, {"one#1": adapters["one"], "two#2": adapters["two"]})
    n = len(prompts())
    batch = prompts() * 3
    ids: list[str | None] = [None] * n + ["one#1"] * n + ["two#2"] * n
    got = run_manual(runner, batch, MAX_TOKENS, budget=budget, adapter_ids=ids)
    assert got == refs["base"] + refs["one"] + refs["two"]


def test_lora_slots_on_base_batch_change_nothing(setup):
    """With adapters loaded, base-model rows still equal plain transformers."""
    base, adapters, refs = setup
    runner = lora_runner(base, {"one#1": adapters["one"]})
    assert run_manual(runner, prompts(), MAX_TOKENS) == refs["base"]
