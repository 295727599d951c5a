"""Gemma 3 270M in bf16 on the CPU against transformers on the same weights, teacher-forced: at every position of
real English prompts, is the engine's most likely next token (its prompt logprobs) the reference's argmax?

Measured here (4 x 256 tokens of standard-library docstrings): transformers' own bf16 agrees with its fp32 at
98.1 % of positions, so no bf16 implementation that rounds differently inside its GEMMs can reach 99 % against
it; ours scored 98.1 % against transformers' bf16 and 98.4 % against fp32. The test therefore holds the engine's
bf16 to transformers' bf16 quality, measured against fp32 in the same run, and to a floor against transformers'
bf16; ``--dtype auto`` keeps fp32 on the CPU because the 99 % bar of issue #18 is not met (docs/benchmarks.md)."""

from __future__ import annotations

import inspect
import json
import textwrap

import pytest
import torch
from paged_engine import LLM, SamplingParams

pytestmark = pytest.mark.gemma

PROMPT_TOKENS = 256
NUM_PROMPTS = 4
MARGIN = 0.005  # 5 of the 1,020 positions: bf16 rounding order may tip that many near-ties either way
FLOOR_VS_BF16 = 0.97


def english_corpus() -> str:
    """Real prose available offline: docstrings of standard-library modules and their members."""
    objects = [json, json.dumps, json.loads, textwrap, textwrap.wrap, textwrap.dedent, inspect, inspect.signature]
    objects += [str, str.split, str.format, dict, dict.get, list, list.sort, int, float, bytes]
    return "\n\n".join(inspect.getdoc(obj) or "" for obj in objects)


def top1(entry) -> int:
    """The most likely token at a prompt position (entry 0 is the prompt's own token, then the top-N by rank)."""
    return next(t for t, r in zip(entry.token_ids[1:], entry.ranks[1:], strict=True) if r == 1)


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b, strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


def test_bf16_top1_is_as_good_as_transformers_bf16():
    from transformers import Gemma3ForCausalLM

    llm = LLM(dtype="bfloat16", block_size=16, kv_cache_memory=256 << 20, max_model_len=1024, num_threads=2)
    corpus = llm.tokenizer.encode(english_corpus())
    prompts = [corpus[i * PROMPT_TOKENS : (i + 1) * PROMPT_TOKENS] for i in range(NUM_PROMPTS)]
    assert len(prompts[-1]) == PROMPT_TOKENS
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1))
    ours = [[top1(entry) for entry in out.prompt_logprobs[1:]] for out in outputs]
    reference = {}
    for dtype in (torch.bfloat16, torch.float32):
        hf = Gemma3ForCausalLM.from_pretrained(llm.engine.model_folder, dtype=dtype).eval()
        with torch.inference_mode():
            reference[dtype] = [hf(torch.tensor([p])).logits[0, :-1].float().argmax(-1).tolist() for p in prompts]
    ours_vs_fp32 = agreement(ours, reference[torch.float32])
    theirs_vs_fp32 = agreement(reference[torch.bfloat16], reference[torch.float32])
    ours_vs_bf16 = agreement(ours, reference[torch.bfloat16])
    figures = (
        f"ours vs fp32 {ours_vs_fp32:.2%}, transformers bf16 vs fp32 {theirs_vs_fp32:.2%}, "
        f"ours vs transformers bf16 {ours_vs_bf16:.2%}"
    )
    assert ours_vs_fp32 >= theirs_vs_fp32 - MARGIN, figures
    assert ours_vs_bf16 >= FLOOR_VS_BF16, figures
