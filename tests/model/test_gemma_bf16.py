"""Gemma 3 270M in bf16 on the CPU against transformers on the same weights, teacher-forced: at every position of
real English prompts, how far is the engine's next-token distribution from transformers' fp32 one, against how
far transformers' own bf16 is?

The measure is the mean KL divergence from fp32, not top-1 agreement alone. Top-1 agreement over ~1,000 positions
moves by several positions with how the rows are batched: on an AMX Xeon, our bf16 agreed with fp32 at 98.6 %
prompt by prompt and 97.8 % with the four prompts in one batch (oneDNN blocks the GEMMs differently), against
transformers' 98.4 %, while the KL divergence stayed at 1.08-1.11x transformers' in both (1.19x with the
attention capped to AVX2). On an AVX2-only Zen 3 the FMA attention kernels, which then kept the softmax
probabilities in fp32 for the value product, measured 1.38x; rounded to bf16 there, as transformers' SDPA and our
AMX variant round them, 1.03x. Transformers' own bf16 agrees with its fp32 at 98.1-98.4 % (Zen 4, the AMX Xeon), so
no bf16 path that rounds differently inside its GEMMs reaches 99 % against it, and ``--dtype auto`` keeps fp32 on
the CPU (docs/benchmarks.md#quality-gates). Top-1 agreement is still held to a floor against both references.
"""

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
KL_RATIO = 1.3  # ours may be this much further from fp32 than transformers' bf16 (measured: 0.87-1.19x)
TOP1_FLOOR = 0.97


def english_corpus() -> str:
    """Real prose available offline: docstrings of standard-library modules and their members."""
    objects = [json, json.dumps, json.loads, textwrap, textwrap.wrap, textwrap.dedent, inspect, inspect.signature]
    objects += [str, str.split, str.format, dict, dict.get, list, list.sort, int, float, bytes]
    return "\n\n".join(inspect.getdoc(obj) or "" for obj in objects)


def agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.argmax(-1) == b.argmax(-1)).float().mean())


def mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over positions of KL(reference || other), from logits ``[positions, vocab]``."""
    log_p, log_q = reference.log_softmax(-1), other.log_softmax(-1)
    return float((log_p.exp() * (log_p - log_q)).sum(-1).mean())


def test_bf16_is_as_close_to_fp32_as_transformers_bf16():
    from transformers import Gemma3ForCausalLM

    llm = LLM(dtype="bfloat16", block_size=16, kv_cache_memory=256 << 20, max_model_len=1024, num_threads=2)
    corpus = llm.tokenizer.encode(english_corpus())
    prompts = [corpus[i * PROMPT_TOKENS : (i + 1) * PROMPT_TOKENS] for i in range(NUM_PROMPTS)]
    assert len(prompts[-1]) == PROMPT_TOKENS
    logits = prompt_logits(llm, prompts)
    reference = {}
    for dtype in (torch.bfloat16, torch.float32):
        hf = Gemma3ForCausalLM.from_pretrained(llm.engine.model_folder, dtype=dtype).eval()
        with torch.inference_mode():
            reference[dtype] = torch.cat([hf(torch.tensor([p])).logits[0, :-1].float() for p in prompts])
    fp32, theirs = reference[torch.float32], reference[torch.bfloat16]
    ours_kl, theirs_kl = mean_kl(fp32, logits), mean_kl(fp32, theirs)
    figures = (
        f"KL from fp32: ours {ours_kl:.5f}, transformers bf16 {theirs_kl:.5f}; top-1 agreement: ours vs fp32 "
        f"{agreement(logits, fp32):.2%}, transformers bf16 vs fp32 {agreement(theirs, fp32):.2%}, ours vs "
        f"transformers bf16 {agreement(logits, theirs):.2%}"
    )
    assert ours_kl <= KL_RATIO * theirs_kl, figures
    assert agreement(logits, fp32) >= TOP1_FLOOR, figures
    assert agreement(logits, theirs) >= TOP1_FLOOR, figures


def prompt_logits(llm: LLM, prompts: list[list[int]]) -> torch.Tensor:
    """The engine's fp32 logits at every prompt position but the last, all prompts in one batch, caught where
    the runner computes them for the prompt logprobs (the sampling rows' call has one row per prompt)."""
    model = llm.engine.core.runner.model
    caught: list[torch.Tensor] = []
    compute_logits = model.compute_logits

    def catching(hidden: torch.Tensor) -> torch.Tensor:
        logits = compute_logits(hidden)
        caught.append(logits.clone())
        return logits

    model.compute_logits = catching
    try:
        llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1))
    finally:
        del model.compute_logits
    prompt_rows = [t for t in caught if t.shape[0] == PROMPT_TOKENS - 1]  # one call per prompt, in order
    assert len(prompt_rows) == len(prompts), [t.shape for t in caught]
    return torch.cat(prompt_rows)
