"""One decoder-only transformer, parameterised by :class:`DecoderSpec`, that every supported architecture uses.

Llama, Mistral, Qwen2, Qwen3 and Gemma 3 differ only in switches (QK-norm, (1+w) norms, norms after attention
and MLP, embedding scaling, per-layer RoPE bases and sliding windows, biases, activation), so they share this
code; each architecture module only translates its Hugging Face config into a spec and names its weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from paged_engine.attention.backend import AttentionMetadata
from paged_engine.kernels import ops
from paged_engine.models.cpu_gemm import (
    PACKED_LINEARS,
    PanelEmbedding,
    PanelLinear,
    cpu_kernels_available,
    pack_linear_layers,
    packed_linear,
)
from paged_engine.models.greedy_head import RescoredGreedyHead, rescored_greedy_unavailable_reason
from paged_engine.models.layers import GatedMLP, PagedAttention, RMSNorm, apply_rope, rope_cos_sin
from paged_engine.parallel.layout import TensorShard

if TYPE_CHECKING:
    from paged_engine.parallel.collectives import PipelineParallel, TensorParallel


@dataclass
class DecoderSpec:
    """Everything the decoder needs to know about one architecture instance."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_inv_freqs: list[torch.Tensor]  # one per distinct RoPE setting
    layer_rope: list[int]  # per layer: index into rope_inv_freqs
    sliding_windows: list[int | None]  # per layer: window in tokens, None for full attention
    attn_scale: float
    activation: str = "silu"
    norm_offset: float = 0.0  # 1.0 for Gemma's (1 + w) norms
    sandwich_norms: bool = False  # norms on the attention and MLP outputs too (Gemma 2/3)
    qk_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    embed_scale: float | None = None
    tie_word_embeddings: bool = False
    attn_logit_softcap: float = 0.0
    final_logit_softcap: float = 0.0
    # HF norm module name -> ours, per layer
    norm_names: dict[str, str] = field(
        default_factory=lambda: {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm"}
    )

    def __post_init__(self) -> None:
        if len(self.layer_rope) != self.num_layers or len(self.sliding_windows) != self.num_layers:
            raise ValueError(
                f"per-layer settings must have num_layers ({self.num_layers}) entries, got "
                f"{len(self.layer_rope)} RoPE and {len(self.sliding_windows)} window entries"
            )


class DecoderLayer(nn.Module):
    """One layer; under tensor parallelism it holds its rank's heads and intermediate rows (QKV and gate/up cut
    by output rows, O and down by input columns), and sums the O and down outputs over the ranks."""

    def __init__(self, spec: DecoderSpec, index: int, tp: TensorParallel | None = None) -> None:
        super().__init__()
        self.rope_index = spec.layer_rope[index]
        self.tp = tp
        shard = tp.shard if tp is not None else None
        self.num_heads = len(shard.heads) if shard else spec.num_heads
        self.num_kv_heads = len(shard.kv_heads) if shard else spec.num_kv_heads
        self.head_dim = spec.head_dim
        q_size, kv_size = self.num_heads * spec.head_dim, self.num_kv_heads * spec.head_dim
        self.split_sizes = [q_size, kv_size, kv_size]
        self.qkv_proj = nn.Linear(spec.hidden_size, q_size + 2 * kv_size, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(q_size, spec.hidden_size, bias=spec.o_bias)
        norm = lambda dim: RMSNorm(dim, spec.rms_norm_eps, spec.norm_offset)  # noqa: E731
        self.q_norm = norm(spec.head_dim) if spec.qk_norm else None
        self.k_norm = norm(spec.head_dim) if spec.qk_norm else None
        self.attn_norm = norm(spec.hidden_size)
        self.mlp_norm = norm(spec.hidden_size)
        self.attn_out_norm = norm(spec.hidden_size) if spec.sandwich_norms else None
        self.mlp_out_norm = norm(spec.hidden_size) if spec.sandwich_norms else None
        self.attn = PagedAttention(
            self.num_heads,
            self.num_kv_heads,
            spec.head_dim,
            spec.attn_scale,
            spec.sliding_windows[index],
            spec.attn_logit_softcap,
        )
        intermediate = len(shard.intermediate) if shard else spec.intermediate_size
        self.mlp = GatedMLP(spec.hidden_size, intermediate, spec.activation, spec.mlp_bias)
        # Set by DecoderForCausalLM.pack_weights_for_cpu: q and k rotated in place by one CPU kernel pass.
        self.fused_rope = False

    def forward(self, x: torch.Tensor, rope: list[tuple[torch.Tensor, ...]], meta: AttentionMetadata) -> torch.Tensor:
        num_tokens = x.shape[0]
        q, k, v = self.qkv_proj(self.attn_norm(x)).split(self.split_sizes, dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope[self.rope_index]
        if self.fused_rope:
            ops.rotary_embedding_(q, k, cos, sin)
        else:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        h = self.o_proj(self.attn(q, k.contiguous(), v.contiguous(), meta).view(num_tokens, -1))
        if self.tp is not None:
            h = self.tp.all_reduce(h)
        if self.attn_out_norm is not None:
            h = self.attn_out_norm(h)
        x = x + h
        h = self.mlp(self.mlp_norm(x))
        if self.tp is not None:
            h = self.tp.all_reduce(h)
        if self.mlp_out_norm is not None:
            h = self.mlp_out_norm(h)
        return x + h


class DecoderForCausalLM(nn.Module):
    """Token ids and positions in, hidden states out; logits only for the rows the caller asks for."""

    def __init__(self, spec: DecoderSpec, tp: TensorParallel | None = None, pp: PipelineParallel | None = None) -> None:
        """``tp``: this rank's share under tensor parallelism (the embedding and LM head hold its vocabulary
        rows); ``pp``: its pipeline stage (it holds that stage's layers; every stage keeps the embedding, final
        norm and head, used by the first and last); ``spec`` stays the whole model's."""
        super().__init__()
        self.spec = spec
        self.tp, self.pp = tp, pp
        rows = tp.shard.vocab_per_rank if tp is not None else spec.vocab_size
        self.embed_tokens: nn.Embedding | PanelEmbedding = nn.Embedding(rows, spec.hidden_size)
        self.layer_range = pp.stage.layers if pp is not None else range(spec.num_layers)
        self.layers = nn.ModuleList(DecoderLayer(spec, i, tp) for i in self.layer_range)
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, spec.norm_offset)
        self.lm_head: nn.Module | None = (
            None if spec.tie_word_embeddings else nn.Linear(spec.hidden_size, rows, bias=False)
        )
        for i, inv_freq in enumerate(spec.rope_inv_freqs):
            self.register_buffer(f"rope_inv_freq_{i}", inv_freq.clone(), persistent=False)
        #: Exact greedy tokens without the whole fp32 head (``greedy_head.py``); set by ``use_rescored_greedy``.
        self.greedy_head: RescoredGreedyHead | None = None
        self.requires_grad_(False)

    def reset_buffers(self) -> None:
        """Recompute non-checkpoint buffers; needed after building on the meta device and ``to_empty()``."""
        device = self.embed_tokens.weight.device
        for i, inv_freq in enumerate(self.spec.rope_inv_freqs):
            self._buffers[f"rope_inv_freq_{i}"] = inv_freq.to(device=device, dtype=torch.float32)

    @property
    def attention_layers(self) -> list[PagedAttention]:
        return [layer.attn for layer in self.layers]

    @property
    def num_local_kv_heads(self) -> int:
        """KV heads this rank caches (all of them without tensor parallelism)."""
        return self.layers[0].num_kv_heads

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp is None:
            return self.embed_tokens(input_ids)
        # vocabulary-parallel: a rank looks up the ids it holds, zeros for the others, and the sum joins them
        vocab = self.tp.shard.vocab
        local = input_ids - vocab.start
        outside = (local < 0) | (local >= len(vocab))
        x = self.embed_tokens(local.masked_fill(outside, 0))
        return self.tp.all_reduce(x.masked_fill(outside[:, None], 0.0))

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        hidden: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states after this rank's layers: normed on the last (or only) stage. A later pipeline stage
        starts from ``hidden``, the stage before's output, instead of the token ids."""
        if hidden is None:
            x = self.embed(input_ids)
            if self.spec.embed_scale is not None:
                x = x * torch.tensor(self.spec.embed_scale, dtype=x.dtype)
        else:
            x = hidden
        rope = [
            rope_cos_sin(positions, getattr(self, f"rope_inv_freq_{i}"), x.dtype)
            for i in range(len(self.spec.rope_inv_freqs))
        ]
        for layer in self.layers:
            x = layer(x, rope, meta)
        return self.norm(x) if self.pp is None or self.pp.stage.is_last else x

    def pack_weights_for_cpu(self) -> None:
        """Pre-pack every GEMM weight, the LM head included (see ``cpu_gemm``), and, where the CPU kernels load,
        run gated activations, RMSNorms and RoPE (fp32 or bf16) through their one-pass ops. A tied head in panels also
        serves the embedding lookups, which frees the dense rows."""
        tied = self.lm_head is None
        head = self.embed_tokens.weight if tied else self.lm_head.weight
        kernels = cpu_kernels_available()
        self.lm_head = packed_linear(head, None, kernels)
        if tied and isinstance(self.lm_head, PanelLinear):
            self.embed_tokens = PanelEmbedding(self.lm_head)
        pack_linear_layers(self, kernels)
        if kernels and head.dtype in (torch.float32, torch.bfloat16):
            for layer in self.layers:
                layer.mlp.fused_activation = layer.mlp.activation in ops.GATED_ACTIVATIONS
                layer.fused_rope = True
            for norm in self.modules():
                if isinstance(norm, RMSNorm):
                    norm.fused = True

    def use_rescored_greedy(self) -> str | None:
        """Pick greedy tokens through a bf16 pass over the packed fp32 head; returns why not where it cannot."""
        reason = rescored_greedy_unavailable_reason(self.lm_head, self.spec.final_logit_softcap)
        if reason is None:
            self.greedy_head = RescoredGreedyHead(self.lm_head)  # type: ignore[arg-type]
        return reason

    def use_tensor_parallel_greedy(self) -> None:
        """Greedy tokens from each rank's own logits: its best (value, token) pairs are gathered instead of the
        whole vocabulary's logits (exact: a rank's columns are scored as the gathered logits would be)."""
        assert self.tp is not None
        tp = self.tp
        self.greedy_head = lambda hidden: tp.gather_argmax(self.local_logits(hidden))  # type: ignore[assignment]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, vocab]`` in fp32 for already-selected hidden rows (only rows that sample)."""
        logits = self.local_logits(hidden)
        if self.tp is not None:
            logits = self.tp.gather_vocab(logits)
        cap = self.spec.final_logit_softcap
        if cap > 0.0:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def local_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """This rank's logits (all of them without tensor parallelism), fp32, before any soft cap."""
        if isinstance(self.lm_head, PACKED_LINEARS):
            logits = self.lm_head(hidden).float()
        elif hidden.is_cuda:
            weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            logits = F.linear(hidden, weight).float()
        else:
            weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            # ``weight @ hidden.T`` streams the [vocab, hidden] matrix once against a small right-hand side,
            # which BLAS runs faster than the skinny ``hidden @ weight.T`` (262,144 columns for Gemma).
            logits = torch.mm(weight, hidden.T).T.float().contiguous()
        return logits

    # --- weight loading -------------------------------------------------------------------------------------

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face named tensors into the (fused) parameters; every parameter must be filled once."""
        params = dict(self.named_parameters())
        filled: dict[str, int] = {}
        spec = self.spec
        layer = self.layers[0]
        q_size, kv_size = layer.num_heads * spec.head_dim, layer.num_kv_heads * spec.head_dim
        intermediate = layer.mlp.intermediate_size
        shards = {
            "q_proj": ("qkv_proj", 0, q_size),
            "k_proj": ("qkv_proj", q_size, kv_size),
            "v_proj": ("qkv_proj", q_size + kv_size, kv_size),
            "gate_proj": ("gate_up_proj", 0, intermediate),
            "up_proj": ("gate_up_proj", intermediate, intermediate),
        }
        for hf_name, tensor in weights:
            name = hf_name.removeprefix("model.")
            if "rotary_emb." in name or (name == "lm_head.weight" and spec.tie_word_embeddings):
                continue
            if self.tp is not None:
                tensor = shard_tensor(self.tp.shard, name, tensor, spec.head_dim)
            target, start, size = name, None, None
            parts = name.split(".")
            if len(parts) >= 4 and parts[0] == "layers":
                if int(parts[1]) not in self.layer_range:
                    continue  # another pipeline stage's
                layer, module, rest = str(int(parts[1]) - self.layer_range.start), parts[2], parts[3:]
                if module in spec.norm_names:
                    target = ".".join(["layers", layer, spec.norm_names[module], *rest])
                elif module in ("self_attn", "mlp"):
                    leaf = rest[0]
                    if leaf in shards:
                        leaf, start, size = shards[leaf]
                    prefix = ["layers", layer] if module == "self_attn" else ["layers", layer, "mlp"]
                    target = ".".join([*prefix, leaf, *rest[1:]])
            param = params.get(target)
            if param is None:
                raise ValueError(f"checkpoint tensor {hf_name!r} has no place in {spec.architecture}")
            dest = param.data if start is None else param.data.narrow(0, start, size)
            if tuple(dest.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"checkpoint tensor {hf_name!r} has shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}"
                )
            dest.copy_(tensor)
            filled[target] = filled.get(target, 0) + 1
        expected = {name: (3 if "qkv_proj" in name else 2 if "gate_up_proj" in name else 1) for name in params}
        missing = sorted(name for name, count in expected.items() if filled.get(name, 0) < count)
        if missing:
            shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise ValueError(f"checkpoint is missing {len(missing)} tensors for {spec.architecture}: {shown}")


# Checkpoint tensors cut by output rows (dim 0) or input columns (dim 1) under tensor parallelism, by leaf name.
_HEAD_ROWS, _KV_ROWS, _MLP_ROWS = ("q_proj",), ("k_proj", "v_proj"), ("gate_proj", "up_proj")
ROW_PARALLEL = ("o_proj", "down_proj")  # inputs cut; outputs summed over ranks, so one rank adds the bias


def shard_tensor(shard: TensorShard, name: str, tensor: torch.Tensor, head_dim: int) -> torch.Tensor:
    """This rank's part of the checkpoint tensor ``name`` (norms and other unsplit tensors as they are)."""
    parts = name.split(".")
    leaf, kind = (parts[-2], parts[-1]) if len(parts) >= 2 else (name, "")
    heads = lambda r: slice(r.start * head_dim, r.stop * head_dim)  # noqa: E731
    if leaf in _HEAD_ROWS:
        return tensor[heads(shard.heads)]
    if leaf in _KV_ROWS:
        return tensor[heads(shard.kv_heads)]
    if leaf in _MLP_ROWS:
        return tensor[shard.intermediate.start : shard.intermediate.stop]
    if leaf in ROW_PARALLEL:
        if kind == "bias":
            return tensor if shard.rank == 0 else torch.zeros_like(tensor)
        cols = heads(shard.heads) if leaf == "o_proj" else slice(shard.intermediate.start, shard.intermediate.stop)
        return tensor[:, cols]
    if name in ("embed_tokens.weight", "lm_head.weight"):
        rows = tensor[shard.vocab.start : shard.vocab.stop]
        padding = shard.vocab_per_rank - rows.shape[0]
        return torch.cat([rows, rows.new_zeros(padding, rows.shape[1])]) if padding else rows
    return tensor
