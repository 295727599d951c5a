"""Building blocks shared by every decoder: RMSNorm variants, rotary embeddings, gated MLP, paged attention.

Numerics follow Hugging Face transformers operation for operation (norms in fp32, RoPE angles computed as
``position * inv_freq`` in fp32, ``rotate_half`` convention) so greedy outputs match it token for token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paged_engine.attention.backend import AttentionBackend, AttentionMetadata
from paged_engine.kernels import ops


class RMSNorm(nn.Module):
    """RMSNorm; ``offset=1.0`` gives Gemma's ``x * (1 + w)`` form (its checkpoints store ``w`` around 0)."""

    def __init__(self, dim: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.ones(dim) if offset == 0.0 else torch.zeros(dim), requires_grad=False)
        # Set by DecoderForCausalLM.pack_weights_for_cpu: one pass of the CPU kernel instead of six torch ops.
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return ops.rms_norm(x, self.weight, self.eps, self.offset)
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (h * (self.offset + self.weight.float())).to(dtype)
        return self.weight * h.to(dtype)


def rope_inv_freq(head_dim: int, params: Mapping[str, Any]) -> torch.Tensor:
    """Inverse RoPE frequencies for a transformers ``rope_parameters`` dict (default, linear, llama3)."""
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        factor = float(params["factor"])
        low_freq_factor = float(params["low_freq_factor"])
        high_freq_factor = float(params["high_freq_factor"])
        old_context = float(params["original_max_position_embeddings"])
        low_freq_wavelen = old_context / low_freq_factor
        high_freq_wavelen = old_context / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, scaled)
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: default, linear, llama3")


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``cos``/``sin`` ``[T, head_dim]`` for ``positions`` ``[T]``; computed once per step and shared by layers."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, head_dim]`` with the neox/``rotate_half`` convention used by HF checkpoints."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


_ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
}


def activation_from_hf(name: str) -> str:
    """Map a transformers activation name to ours; unknown names are refused with the supported list."""
    mapping = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}
    mapping["gelu"] = "gelu"
    if name not in mapping:
        raise ValueError(f"unsupported activation {name!r}; supported: {', '.join(sorted(mapping))}")
    return mapping[name]


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with gate and up fused into one matmul."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.activation = activation
        self.act = _ACTIVATIONS[activation]
        # Set by DecoderForCausalLM.pack_weights_for_cpu: act(gate) * up in one pass of the CPU kernel.
        self.fused_activation = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.fused_activation:
            return self.down_proj(ops.gated_activation(self.activation, gate_up))
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(self.act(gate) * up)


class PagedAttention(nn.Module):
    """Writes this step's K/V into the layer's paged cache and attends through the block tables.

    The model runner binds ``kv_cache``, ``kv_group`` and ``backend`` after it has allocated the cache; the
    layer itself holds no request state.
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float,
        sliding_window: int | None,
        soft_cap: float,
    ) -> None:
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.sliding_window = sliding_window
        self.soft_cap = soft_cap
        self.kv_cache: tuple[torch.Tensor, torch.Tensor] | None = None
        self.kv_group = 0
        self.backend: AttentionBackend | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        if self.kv_cache is None or self.backend is None:
            raise RuntimeError("attention layer used before the model runner bound its KV cache and backend")
        key_cache, value_cache = self.kv_cache
        self.backend.reshape_and_cache(k, v, key_cache, value_cache, meta.slot_mappings[self.kv_group])
        out = torch.empty_like(q)
        self.backend.paged_attention(
            out,
            q,
            key_cache,
            value_cache,
            meta.block_tables[self.kv_group],
            meta.query_start_loc,
            meta.seq_lens,
            self.scale,
            self.sliding_window if self.sliding_window is not None else -1,
            self.soft_cap,
        )
        return out
