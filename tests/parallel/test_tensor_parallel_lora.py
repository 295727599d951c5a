"""LoRA adapters under tensor and pipeline parallelism, against PEFT: each rank reads its cut of the adapter (its
heads' rows and columns, its stage's layers) into the same slot,
a mixed batch of two adapters and the base model gives PEFT's greedy tokens, and loads, unloads and refusals go
to every rank."""

from __future__ import annotations

import shutil

import pytest
from paged_engine import LLM, SamplingParams
from paged_engine.lora.registry import LoraError

from tests.model.lora_adapters import two_adapters_and_references
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import BLOCK_SIZE

MAX_TOKENS = 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base, adapters, refs = two_adapters_and_references(tmp_path_factory.mktemp("lora"), prompts(), MAX_TOKENS)
    return base, adapters, refs


@pytest.mark.parametrize("layout", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_adapters_across_two_ranks_match_peft(setup, tmp_path, layout):
    base, adapters, refs = setup
    tp, pp = layout
    llm = LLM(str(base), tensor_parallel_size=tp, pipeline_parallel_size=pp, num_threads=1, block_size=BLOCK_SIZE,
              num_kv_blocks=256, max_model_len=96, max_num_seqs=16, max_num_batched_tokens=16, max_lora_rank=8,
              lora_modules=[f"one={adapters['one']}"])  # fmt: skip
    try:
        llm.load_lora("two", str(adapters["two"]))  # at run time, through the workers
        n = len(prompts())
        names = [None] * n + ["one"] * n + ["two"] * n  # one mixed batch
        got = [o.outputs[0].token_ids for o in llm.generate(prompts() * 3, GREEDY, lora_name=names)]
        assert got == refs["base"] + refs["one"] + refs["two"]

        broken = tmp_path / "broken"
        shutil.copytree(adapters["two"], broken)
        (broken / "adapter_model.safetensors").write_bytes(b"not safetensors")
        with pytest.raises(LoraError, match=r"cannot read adapter_model\.safetensors"):  # refused by the ranks
            llm.load_lora("broken", str(broken))
        assert [lora.name for lora in llm.engine.core.loaded_loras()] == ["one", "two"]

        llm.unload_lora("two")
        llm.load_lora("again", str(adapters["two"]))  # the freed slot, rewritten on every rank
        again = llm.generate(prompts(), GREEDY, lora_name="again")
        assert [o.outputs[0].token_ids for o in again] == refs["two"]
    finally:
        llm.shutdown()
