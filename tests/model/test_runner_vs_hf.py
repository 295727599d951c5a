"""Greedy outputs of the model runner equal transformers' token for token, on tiny random checkpoints."""

from __future__ import annotations

import pytest
import torch

from tests.model.harness import make_runner, run_manual
from tests.model.tiny_models import ARCHS, BLOCK_SIZE, VOCAB, save_tiny_model

MAX_TOKENS = 12


@pytest.fixture(scope="module", params=ARCHS)
def tiny_model(request, tmp_path_factory):
    """(folder, transformers' greedy outputs for ``prompts()``), computed once per architecture."""
    folder = save_tiny_model(request.param, tmp_path_factory.mktemp(request.param))
    return folder, hf_greedy(folder, prompts(), MAX_TOKENS)


def hf_greedy(folder, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    model.generation_config.eos_token_id = None  # the engine side ignores EOS too (fixed-length outputs)
    outs = []
    for prompt in prompts:
        gen = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
        outs.append(gen[0, len(prompt) :].tolist())
    return outs


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    lengths = [BLOCK_SIZE - 3, BLOCK_SIZE, BLOCK_SIZE + 5, 3 * BLOCK_SIZE + 1]  # shorter, equal, longer than a block
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("budget", [1000, 7])
def test_greedy_matches_transformers(tiny_model, budget):
    folder, expected = tiny_model
    got = run_manual(make_runner(folder, block_size=BLOCK_SIZE), prompts(), MAX_TOKENS, budget=budget)
    assert got == expected
