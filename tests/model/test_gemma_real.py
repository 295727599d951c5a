"""Gemma 3 270M with its real (dequantised Q4_K_M) weights: the engine's greedy continuations equal transformers'
on the same weights for 32 tokens, and the reported logprobs match transformers' within fp32 tolerance."""

from __future__ import annotations

import pytest
import torch
from paged_engine import LLM, SamplingParams

pytestmark = pytest.mark.gemma

PROMPTS = [
    "The capital of France is",
    "Here is a short poem about the sea:\n",
    "def fibonacci(n):\n    ",
]
NEW_TOKENS = 32
TOP = 5


@pytest.fixture(scope="module")
def llm():
    return LLM(block_size=16, kv_cache_memory=256 << 20, max_model_len=1024, num_threads=2)


def test_greedy_and_logprobs_match_transformers(llm):
    from transformers import Gemma3ForCausalLM

    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=TOP)
    outputs = llm.generate(PROMPTS, params)
    hf = Gemma3ForCausalLM.from_pretrained(llm.engine.model_folder, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    for output in outputs:
        ids = torch.tensor([output.prompt_token_ids])
        with torch.inference_mode():
            gen = hf.generate(
                ids,
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                return_dict_in_generate=True,
                output_logits=True,
                pad_token_id=0,
            )
        expected = gen.sequences[0, ids.shape[1] :].tolist()
        completion = output.outputs[0]
        assert completion.token_ids == expected, output.prompt
        assert len(completion.text) > 0
        for step, logprobs in enumerate(completion.logprobs):
            reference = torch.log_softmax(gen.logits[step][0].float(), dim=-1)
            got = torch.tensor(logprobs.logprobs)
            assert torch.allclose(got, reference[logprobs.token_ids], atol=2e-3, rtol=0), (output.prompt, step)
