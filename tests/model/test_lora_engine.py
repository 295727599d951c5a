"""LoRA through the whole engine (``LLM``): mixed batches, prefix-cache isolation, loading and unloading."""

from __future__ import annotations

import pytest
from paged_engine import SamplingParams
from paged_engine.core import RequestValidationError
from paged_engine.lora.registry import LoraError

from tests.model.lora_adapters import two_adapters_and_references
from tests.model.test_engine import make_llm, token_ids
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import BLOCK_SIZE

MAX_TOKENS = 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base, adapters, refs = two_adapters_and_references(tmp_path_factory.mktemp("lora"), prompts(), MAX_TOKENS)
    assert refs["one"] != refs["base"] and refs["two"] != refs["base"]
    return base, adapters, refs


def modules(adapters) -> list[str]:
    return [f"{name}={path}" for name, path in adapters.items()]


def test_mixed_batch_of_two_adapters_and_base(setup):
    base, adapters, refs = setup
    llm = make_llm(base, lora_modules=modules(adapters), max_lora_rank=8, max_num_batched_tokens=16)
    n = len(prompts())
    names = [None] * n + ["one"] * n + ["two"] * n
    got = token_ids(llm.generate(prompts() * 3, GREEDY, lora_name=names))
    assert got == refs["base"] + refs["one"] + refs["two"]


def test_prefix_cache_never_shared_across_adapters(setup):
    """The same prompt under two adapters and the base: no cross hits; a repeat under one adapter hits."""
    base, adapters, refs = setup
    llm = make_llm(base, lora_modules=modules(adapters), max_lora_rank=8, enable_prefix_caching=True)
    prompt = prompts()[3]  # 3 full blocks and one token
    first = llm.generate([prompt], GREEDY, lora_name="one")[0]
    assert first.num_cached_tokens == 0
    for name in ("two", None):
        other = llm.generate([prompt], GREEDY, lora_name=name)[0]
        assert other.num_cached_tokens == 0, f"{name} hit blocks computed under adapter one"
    again = llm.generate([prompt], GREEDY, lora_name="one")[0]
    assert again.num_cached_tokens == 3 * BLOCK_SIZE
    assert again.outputs[0].token_ids == refs["one"][3]


def test_load_and_unload_at_run_time(setup):
    base, adapters, refs = setup
    llm = make_llm(base, enable_lora=True, max_loras=1, max_lora_rank=4, enable_prefix_caching=True)
    with pytest.raises(RequestValidationError, match="no LoRA adapter named 'one'"):
        llm.generate(prompts(), GREEDY, lora_name="one")
    with pytest.raises(LoraError, match="rank 8, above max_lora_rank=4"):
        llm.load_lora("two", str(adapters["two"]))
    with pytest.raises(LoraError, match=r"no adapter_config\.json"):
        llm.load_lora("bad", str(base))
    assert llm.load_lora("one", str(adapters["one"])).rank == 4
    with pytest.raises(LoraError, match="all 1 adapter slots are in use"):
        llm.load_lora("one-again", str(adapters["one"]))
    assert token_ids(llm.generate(prompts(), GREEDY, lora_name="one")) == refs["one"]
    llm.unload_lora("one")
    with pytest.raises(RequestValidationError, match="no LoRA adapter named 'one'"):
        llm.generate(prompts(), GREEDY, lora_name="one")
    # loaded again under the same name: a fresh cache id, so the old adapter's blocks are never served
    llm.load_lora("one", str(adapters["one"]))
    again = llm.generate(prompts(), GREEDY, lora_name="one")
    assert [o.num_cached_tokens for o in again] == [0, 0, 0, 0]
    assert token_ids(again) == refs["one"]


def test_lora_off_refuses_loads(setup):
    base, adapters, _ = setup
    llm = make_llm(base)
    with pytest.raises(LoraError, match="LoRA is off"):
        llm.load_lora("one", str(adapters["one"]))


def test_config_refuses_bad_lora_settings(setup):
    base, adapters, _ = setup
    with pytest.raises(ValueError, match="expected NAME=PATH"):
        make_llm(base, lora_modules=["no-equals-sign"])
    with pytest.raises(ValueError, match="more than max_loras=1"):
        make_llm(base, lora_modules=modules(adapters), max_loras=1)
    with pytest.raises(LoraError, match="rank 8, above max_lora_rank=4"):
        make_llm(base, lora_modules=modules(adapters), max_lora_rank=4)
