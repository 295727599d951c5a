"""KV-cache layout: grouping of layers, sizing from a memory budget, binding, and sliding-window savings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from paged_engine.core.kv_cache_spec import FullAttentionSpec, SlidingWindowSpec
from paged_engine.models.decoder import DecoderForCausalLM
from paged_engine.models.gemma3 import gemma3_spec
from paged_engine.sampling_params import SamplingParams
from paged_engine.worker.kv_cache import allocate_kv_caches, group_layers, layer_specs, plan_kv_cache, resolve_budget

from tests.model.test_engine import make_llm
from tests.model.tiny_models import save_tiny_model, save_tiny_tokenizer


def gemma_270m_shaped(num_layers: int = 18, hidden: int = 64) -> DecoderForCausalLM:
    """Gemma 3 270M's layer layout (sliding window 512, a full layer every 6th), with tiny matrices."""
    config = SimpleNamespace(
        architectures=["Gemma3ForCausalLM"],
        vocab_size=32,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(num_layers)],
        sliding_window=512,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        query_pre_attn_scalar=256,
        hidden_activation="gelu_pytorch_tanh",
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
    )
    with torch.device("meta"):
        return DecoderForCausalLM(gemma3_spec(config))


def test_gemma_270m_layout_groups():
    model = gemma_270m_shaped()
    groups = group_layers(layer_specs(model, 16))
    assert [len(g.layer_names) for g in groups] == [3] * 6
    assert [type(g.spec) for g in groups] == [SlidingWindowSpec] * 5 + [FullAttentionSpec]
    assert groups[0].layer_names == ("layers.0", "layers.1", "layers.2")
    assert groups[5].layer_names == ("layers.5", "layers.11", "layers.17")
    assert groups[0].spec == SlidingWindowSpec(16, 512)


def test_plan_from_bytes_and_its_limits():
    model = gemma_270m_shaped()
    per_block = 3 * 2 * 16 * 1 * 256 * 4  # 3 shared tensors, K and V, 16 tokens, 1 KV head, head dim 256, fp32
    plan = plan_kv_cache(model, 16, torch.float32, 4096, kv_cache_memory=1000 * per_block + 5)
    assert plan.bytes_per_block == per_block and plan.config.num_blocks == 1000 and plan.group_size == 3
    with pytest.raises(ValueError, match=r"cannot hold one sequence of max_model_len=32768 tokens, which needs \d+"):
        plan_kv_cache(model, 16, torch.float32, 32768, kv_cache_memory=1000 * per_block)
    with pytest.raises(ValueError, match=r"fraction of free memory must be in \(0, 1\], got 1.5"):
        resolve_budget(1.5, torch.device("cpu"))
    with pytest.raises(ValueError, match="positive number of bytes, got -1"):
        resolve_budget(-1, torch.device("cpu"))
    assert 0 < resolve_budget(0.01, torch.device("cpu")) < resolve_budget(0.02, torch.device("cpu"))


def test_allocation_binds_layer_i_of_each_group_to_shared_tensor_i():
    model = gemma_270m_shaped(num_layers=12, hidden=32).to_empty(device="cpu")
    plan = plan_kv_cache(model, 4, torch.float32, 64, num_blocks=120)
    caches = allocate_kv_caches(model, plan, torch.float32)
    assert len(caches) == 2 and caches[0][0].shape == (120, 4, 1, 256)
    layers = model.attention_layers
    for group_index, group in enumerate(plan.config.groups):
        for position, name in enumerate(group.layer_names):
            layer = layers[int(name.split(".")[1])]
            assert layer.kv_group == group_index and layer.kv_cache is caches[position]


def test_sliding_window_layers_hold_fewer_blocks(tmp_path):
    """A long sequence on a model with sliding layers (window 12, block 8) holds far fewer blocks than the
    same sequence in a layout where every layer keeps its whole history."""
    folder = save_tiny_model("gemma3", tmp_path)
    save_tiny_tokenizer(folder)
    llm = make_llm(folder, max_model_len=128, max_num_batched_tokens=8)
    engine = llm.engine
    engine.add_request("long", list(range(3, 83)), SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    kv = engine.core.scheduler.kv
    groups = engine.core.scheduler.kv.config.groups
    peak_held = peak_tokens = 0
    while engine.has_unfinished_requests():
        engine.step()
        if kv.holds_blocks("long"):
            held = sum(1 for ids in kv.get_block_ids("long") for b in ids if b != 0)
            peak_held = max(peak_held, held)
            peak_tokens = engine.core.scheduler.get_request("long").num_computed_tokens
    assert [type(g.spec) for g in groups] == [SlidingWindowSpec, FullAttentionSpec]  # 2 layers each
    assert peak_tokens >= 100
    blocks = -(-peak_tokens // 8)
    # the full group holds every block; the sliding group only what the current chunk (<= 8 tokens) and the
    # 11 tokens before it touch: at most ceil((11 + 8) / 8) + 1 = 4 blocks
    assert peak_held <= blocks + 4
    assert peak_held < 2 * blocks  # what both groups would hold without freeing out-of-window blocks
