"""A model of any head size is served: the kernels where they cover it, the torch reference otherwise, never a
crash on the first request (a small Qwen3 with a head size the CPU kernel lacks used to kill the engine core).
Greedy outputs equal transformers' either way."""

from __future__ import annotations

import pytest
import torch
from paged_engine import LLM, SamplingParams
from paged_engine.attention.selection import CPU_HEAD_SIZES
from paged_engine.kernels import ops

from tests.model.tiny_models import VOCAB, save_tiny_tokenizer

pytestmark = pytest.mark.slow


def save_qwen3(folder, head_dim: int):  # type: ignore[no-untyped-def]
    import transformers as tf

    config = tf.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=head_dim, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(head_dim)
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.2)
    model.config.architectures = ["Qwen3ForCausalLM"]
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.mark.parametrize("head_dim", range(16, 257, 16))
def test_every_head_size_serves_and_matches_transformers(tmp_path, head_dim: int) -> None:
    ops.load()  # CI has a compiler: the kernels must build, so "cpu" is the expected choice where they cover
    hf = save_qwen3(tmp_path, head_dim)
    save_tiny_tokenizer(tmp_path)
    prompt = [5, 17, 33, 4, 90, 12, 7]
    with torch.no_grad():
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt) :].tolist()
    llm = LLM(str(tmp_path), block_size=8, num_kv_blocks=64, max_model_len=64)
    report = llm.engine.core.report
    assert report.attention_backend == ("cpu" if head_dim in CPU_HEAD_SIZES else "reference")
    assert (report.attention_fallback == "") == (head_dim in CPU_HEAD_SIZES)
    out = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))[0]
    assert out.outputs[0].token_ids == expected
