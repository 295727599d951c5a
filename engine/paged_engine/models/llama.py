"""Llama (2/3), Mistral, Qwen2/2.5 and Qwen3 as :class:`DecoderSpec` instances.

They are one family: pre-norm RMSNorm blocks, SwiGLU MLP, RoPE, GQA. Differences handled here: Qwen2's
q/k/v biases, Qwen3's per-head QK-norm, Mistral's sliding window on every layer, and ``layer_types`` for
checkpoints that mix sliding and full attention.
"""

from __future__ import annotations

from typing import Any

from paged_engine.models.decoder import DecoderSpec
from paged_engine.models.layers import activation_from_hf, rope_inv_freq


def rope_parameters(config: Any) -> dict[str, Any]:
    """The RoPE settings of a transformers config, old (``rope_theta``/``rope_scaling``) or new style."""
    params = getattr(config, "rope_parameters", None)
    if params:
        return dict(params)
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": getattr(config, "rope_theta", 10000.0)}
    scaling = getattr(config, "rope_scaling", None)
    if scaling:
        out.update(scaling)
        out["rope_type"] = scaling.get("rope_type", scaling.get("type", "default"))
    return out


def sliding_windows(config: Any) -> list[int | None]:
    """Per-layer windows: from ``layer_types`` when present, else the model-wide ``sliding_window`` (Mistral)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return [window if kind == "sliding_attention" else None for kind in layer_types]
    return [window] * config.num_hidden_layers


def head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def llama_family_spec(config: Any) -> DecoderSpec:
    arch = config.architectures[0]
    dim = head_dim(config)
    layers = config.num_hidden_layers
    attention_bias = bool(getattr(config, "attention_bias", False))
    is_qwen2 = arch == "Qwen2ForCausalLM"
    return DecoderSpec(
        architecture=arch,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        head_dim=dim,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        rope_inv_freqs=[rope_inv_freq(dim, rope_parameters(config))],
        layer_rope=[0] * layers,
        sliding_windows=sliding_windows(config),
        attn_scale=dim**-0.5,
        activation=activation_from_hf(getattr(config, "hidden_act", "silu")),
        qk_norm=arch == "Qwen3ForCausalLM",
        qkv_bias=is_qwen2 or attention_bias,
        o_bias=attention_bias and not is_qwen2,
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
    )
