"""The KV-cache and weight arithmetic that sizes a deployment (``paged-ctl plan``). Pure: numbers in, numbers out.

One token's KV cache is a key and a value vector per KV head in every layer: ``2 × layers × KV heads × head dim ×
bytes per element``. Every layer is counted as full attention (the engine's block pool gives back blocks that leave
a sliding window, so for such models the figure is an upper bound). Tensor parallelism splits the KV heads (each
rank keeps at least one) and the weights across the GPUs of one replica. The KV cache gets a fraction of what the
weights leave free on each GPU, as the engine sizes it; the tensor-parallel size chosen is the one that serves the
load with the fewest GPUs (the smallest one that fits can need many more: few requests fit beside large weights).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paged_platform.engine_contract.memory import DEFAULT_GPU_FRACTION

#: Bytes per element of the dtypes the engine runs (``paged-engine serve --dtype``).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = ("auto", *DTYPE_BYTES)
#: What the engine's ``--dtype auto`` means on a GPU (``paged_engine.engine.config``: bfloat16 on a GPU).
GPU_AUTO_DTYPE = "bfloat16"
#: Tensor-parallel sizes tried, smallest first: powers of two up to one 8-GPU node.
TP_SIZES = (1, 2, 4, 8)
#: Share of a GPU's free memory, once the weights are loaded, that the engine gives its KV cache when
#: ``kvCacheMemory`` is unset (the rest: activations, CUDA graphs, the runtime): the engine contract's.
DEFAULT_MEMORY_FRACTION = DEFAULT_GPU_FRACTION

_KV_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads")
_WEIGHT_FIELDS = ("vocab_size", "intermediate_size")
#: Keys of MoE layouts whose layers differ (dense first layers, experts every n-th layer): not modelled.
_LAYERED_MOE_KEYS = ("first_k_dense_replace", "n_routed_experts", "moe_layer_freq")


class SizingError(ValueError):
    """The config does not describe a model this arithmetic covers; the message says what is missing."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a Hugging Face config that size the KV cache and the weights."""

    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    config: Mapping[str, Any]  # the text model's config (``text_config`` merged over the top level)

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each of ``tp`` ranks holds: an even share, at least one (replicated when fewer than ranks)."""
        return math.ceil(self.kv_heads / tp)

    @property
    def sliding_window(self) -> int | None:
        window = self.config.get("sliding_window")
        if not isinstance(window, int) or window <= 0 or self.config.get("use_sliding_window") is False:
            return None
        return window

    @property
    def max_position_embeddings(self) -> int | None:
        value = self.config.get("max_position_embeddings")
        return value if isinstance(value, int) else None


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A multimodal config's language model (``text_config``, as in Gemma 3), with the top level's other keys."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else dict(config)


def _positive_ints(config: Mapping[str, Any], fields: tuple[str, ...], why: str) -> dict[str, int]:
    missing = [f for f in fields if f not in config]
    if missing:
        raise SizingError(f"the config lacks {', '.join(missing)} (needed for {why})")
    bad = [f for f in fields if isinstance(config[f], bool) or not isinstance(config[f], int) or config[f] < 1]
    if bad:
        raise SizingError(f"the config's {', '.join(f'{f}={config[f]!r}' for f in bad)} must be positive integers")
    return {f: config[f] for f in fields}


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """The shape of the model a ``config.json`` describes, or a SizingError naming what is missing."""
    text = _text_config(config)
    if "kv_lora_rank" in text:
        raise SizingError("the config uses multi-head latent attention (kv_lora_rank): its KV cache is not sized here")
    ints = _positive_ints(text, _KV_FIELDS, "the KV-cache size")
    heads = ints["num_attention_heads"]
    optional = _positive_ints(text, tuple(f for f in ("num_key_value_heads", "head_dim") if text.get(f)), "sizing")
    if "head_dim" not in optional and ints["hidden_size"] % heads:
        raise SizingError(f"hidden_size {ints['hidden_size']} is not a multiple of num_attention_heads {heads}")
    return ModelShape(
        layers=ints["num_hidden_layers"],
        hidden_size=ints["hidden_size"],
        heads=heads,
        kv_heads=optional.get("num_key_value_heads", heads),
        head_dim=optional.get("head_dim", ints["hidden_size"] // heads),
        config=text,
    )


def kv_bytes_per_token(shape: ModelShape, element_bytes: int, tp: int = 1) -> int:
    """Bytes one token's keys and values take on one of ``tp`` ranks (``tp=1``: the whole replica)."""
    return 2 * shape.layers * shape.kv_heads_per_rank(tp) * shape.head_dim * element_bytes


def _mlp_parameters(shape: ModelShape) -> int:
    """One layer's MLP: gate, up and down projections; for a mixture of experts, every expert plus the router."""
    cfg, hidden = shape.config, shape.hidden_size
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    if not experts:
        return 3 * hidden * _positive_ints(cfg, ("intermediate_size",), "the weight size")["intermediate_size"]
    layered = [k for k in _LAYERED_MOE_KEYS if cfg.get(k)]
    if layered or cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        keys = ", ".join(layered or ["mlp_only_layers/decoder_sparse_step"])
        raise SizingError(
            f"the config's mixture of experts differs between layers ({keys}): its parameters are not estimated here;"
            " point at the model folder with its *.safetensors files to count them"
        )
    size_key = "moe_intermediate_size" if cfg.get("moe_intermediate_size") else "intermediate_size"
    per_expert = _positive_ints(cfg, (size_key,), "the experts' size")[size_key]
    shared = cfg.get("shared_expert_intermediate_size") or 0
    shared_params = 3 * hidden * shared + hidden if shared else 0  # the shared expert and its gate
    return experts * 3 * hidden * per_expert + hidden * experts + shared_params


def estimate_parameters(shape: ModelShape) -> int:
    """Parameters of a decoder-only transformer from its config: the embedding, each layer's attention (q, k, v, o;
    q/k/v biases where the config has them), MLP and two norms, the final norm, and the LM head unless tied.

    Leaves out what configs do not describe (a vision tower, q/k norms): they are small next to the rest."""
    cfg, hidden = shape.config, shape.hidden_size
    vocab = _positive_ints(cfg, ("vocab_size",), "the weight size")["vocab_size"]
    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if cfg.get("attention_bias") or cfg.get("model_type") in ("qwen2", "qwen2_moe"):
        attention += q_out + 2 * kv_out
    layer = attention + _mlp_parameters(shape) + 2 * hidden
    tied = cfg.get("tie_word_embeddings", True)  # Hugging Face's default
    return vocab * hidden * (1 if tied else 2) + shape.layers * layer + hidden


@dataclass(frozen=True)
class TensorParallelFit:
    """One tensor-parallel size tried: what each GPU holds, how many requests of the context fit one replica, and
    the replicas and GPUs the load needs at this size."""

    tp: int
    weight_bytes_per_gpu: int
    free_bytes_per_gpu: int  # after the weights (negative: the weights do not fit)
    kv_budget_bytes_per_gpu: int  # the memory fraction of what is free, as the engine sizes its cache
    kv_bytes_per_request_per_gpu: int
    requests: int
    concurrency: int

    @property
    def replicas(self) -> int | None:
        return math.ceil(self.concurrency / self.requests) if self.requests else None

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.tp * self.replicas


@dataclass(frozen=True)
class Plan:
    dtype: str
    kv_dtype: str
    context: int
    concurrency: int
    attention_heads: int
    gpu_memory_bytes: int
    memory_fraction: float
    parameters: int
    weight_bytes: int
    kv_bytes_per_token: int
    tried: tuple[TensorParallelFit, ...]

    @property
    def kv_bytes_per_request(self) -> int:
        return self.kv_bytes_per_token * self.context

    @property
    def chosen(self) -> TensorParallelFit | None:
        """The size that serves the load with the fewest GPUs (the smaller size on a tie: finer scaling steps);
        None when no size holds the weights and one request."""
        fits = [t for t in self.tried if t.gpus is not None]
        return min(fits, key=lambda t: (t.gpus, t.tp)) if fits else None


def resolve_dtype(dtype: str, weights: str | None = None) -> str:
    """``auto`` as the engine resolves it on a GPU; for the KV cache, ``auto`` is the weights' dtype (the engine
    keeps its caches in the model's dtype)."""
    if dtype not in DTYPES:
        raise SizingError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    return weights or GPU_AUTO_DTYPE


def plan(
    shape: ModelShape,
    *,
    parameters: int,
    context: int,
    concurrency: int,
    gpu_memory_bytes: int,
    dtype: str = "auto",
    kv_dtype: str = "auto",
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    weight_bytes: int | None = None,
) -> Plan:
    """Size a deployment at each tensor-parallel size (a power of two dividing the attention heads, up to 8): the
    weights per GPU, the KV cache the engine sizes from what is left (``memory_fraction`` of it), the requests of
    ``context`` tokens that fit, and the replicas and GPUs ``concurrency`` requests need.

    ``weight_bytes`` overrides ``parameters × bytes per element`` (a checkpoint of quantized tensors)."""
    for name, value in (("context", context), ("concurrency", concurrency), ("gpu memory", gpu_memory_bytes)):
        if value < 1:
            raise SizingError(f"{name} must be at least 1, got {value}")
    if not 0 < memory_fraction <= 1:
        raise SizingError(f"the memory fraction must be in (0, 1], got {memory_fraction}")
    weights_dtype = resolve_dtype(dtype)
    cache_dtype = resolve_dtype(kv_dtype, weights_dtype)
    weights = weight_bytes if weight_bytes is not None else parameters * DTYPE_BYTES[weights_dtype]
    tried = []
    for tp in TP_SIZES:
        if shape.heads % tp:
            continue
        per_gpu = math.ceil(weights / tp)
        free = gpu_memory_bytes - per_gpu
        budget = int(max(0, free) * memory_fraction)
        kv_request = kv_bytes_per_token(shape, DTYPE_BYTES[cache_dtype], tp) * context
        tried.append(TensorParallelFit(tp, per_gpu, free, budget, kv_request, budget // kv_request, concurrency))
    return Plan(
        dtype=weights_dtype,
        kv_dtype=cache_dtype,
        context=context,
        concurrency=concurrency,
        attention_heads=shape.heads,
        gpu_memory_bytes=gpu_memory_bytes,
        memory_fraction=memory_fraction,
        parameters=parameters,
        weight_bytes=weights,
        kv_bytes_per_token=kv_bytes_per_token(shape, DTYPE_BYTES[cache_dtype]),
        tried=tuple(tried),
    )


def explain_misfit(plan: Plan) -> str:
    """Why no tensor-parallel size of one 8-GPU node holds the model, and what would help."""
    last = plan.tried[-1]
    gib = 2**30
    help_ = "GPUs with more memory, a smaller dtype, or pipeline parallelism across nodes (spec.parallelism)"
    if last.free_bytes_per_gpu <= 0:
        why = (
            f"the weights alone take {last.weight_bytes_per_gpu / gib:.1f} GiB per GPU at tensor parallel {last.tp},"
            f" more than the GPU's {plan.gpu_memory_bytes / gib:.1f} GiB"
        )
    else:
        why = (
            f"at tensor parallel {last.tp}, the KV cache gets {last.kv_budget_bytes_per_gpu / gib:.1f} GiB per GPU"
            f" ({plan.memory_fraction:g} of the {last.free_bytes_per_gpu / gib:.1f} GiB the weights leave), but one"
            f" request of {plan.context} tokens needs {last.kv_bytes_per_request_per_gpu / gib:.1f} GiB"
        )
        help_ = f"a shorter --context, {help_}"
    if last.tp < TP_SIZES[-1]:
        why += f" (a larger tensor-parallel size must divide the {plan.attention_heads} attention heads)"
    return f"No tensor-parallel size of one 8-GPU node serves this model: {why}. Use {help_}."
