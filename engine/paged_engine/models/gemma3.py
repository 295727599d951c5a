"""Gemma 3 (text) as a :class:`DecoderSpec`.

Gemma 3 departs from Llama in: sliding-window layers with a full-attention layer every 6th (``layer_types``),
a separate RoPE base for the sliding layers, QK-norm, ``(1 + w)`` RMSNorms, norms both before and after
attention and MLP, embeddings scaled by ``sqrt(hidden_size)``, GeGLU (tanh GELU), attention scaled by
``query_pre_attn_scalar ** -0.5``, tied embeddings, and optional logit soft-capping.
"""

from __future__ import annotations

from typing import Any

from paged_engine.models.decoder import DecoderSpec
from paged_engine.models.layers import activation_from_hf, rope_inv_freq
from paged_engine.models.llama import head_dim

GEMMA3_NORM_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "attn_out_norm",
    "pre_feedforward_layernorm": "mlp_norm",
    "post_feedforward_layernorm": "mlp_out_norm",
}


def gemma3_spec(config: Any) -> DecoderSpec:
    dim = head_dim(config)
    layer_types = list(config.layer_types)
    rope_params = config.rope_parameters
    kinds = ["sliding_attention", "full_attention"]
    return DecoderSpec(
        architecture=config.architectures[0],
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        head_dim=dim,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        rope_inv_freqs=[rope_inv_freq(dim, rope_params[kind]) for kind in kinds],
        layer_rope=[kinds.index(kind) for kind in layer_types],
        sliding_windows=[config.sliding_window if kind == "sliding_attention" else None for kind in layer_types],
        attn_scale=float(config.query_pre_attn_scalar) ** -0.5,
        activation=activation_from_hf(config.hidden_activation),
        norm_offset=1.0,
        sandwich_norms=True,
        qk_norm=True,
        embed_scale=config.hidden_size**0.5,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
        attn_logit_softcap=float(config.attn_logit_softcapping or 0.0),
        final_logit_softcap=float(config.final_logit_softcapping or 0.0),
        norm_names=dict(GEMMA3_NORM_NAMES),
    )
