"""Read a PEFT LoRA folder (``adapter_config.json`` + ``adapter_model.safetensors``) into per-projection tensors.

PEFT adds ``scale * B @ A`` to each targeted ``nn.Linear`` of the Hugging Face model (``scale = lora_alpha / r``,
or ``lora_alpha / sqrt(r)`` with rsLoRA). Our decoder fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj``, so each checkpoint pair is placed as a *sub-projection* of a fused linear, with the scale
folded into ``B``. Features that change the forward beyond ``B @ A`` (DoRA, LoRA biases, ``modules_to_save``,
per-module rank/alpha patterns, embedding or LM-head targets) are refused by name instead of being served wrong.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from paged_engine.lora.registry import LoraError
from paged_engine.models.decoder import ROW_PARALLEL, DecoderSpec, shard_tensor
from paged_engine.parallel.layout import TensorShard

# fused linear -> the Hugging Face projections it holds, in output order
FUSED_PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "o_proj": ("o_proj",),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "down_proj": ("down_proj",),
}
_PLACE = {hf: (fused, i) for fused, subs in FUSED_PROJECTIONS.items() for i, hf in enumerate(subs)}


def projection_shapes(spec: DecoderSpec, shard: TensorShard | None = None) -> dict[str, tuple[int, int]]:
    """``(in_features, out_features)`` of every Hugging Face projection an adapter may target (of a rank's share
    under tensor parallelism)."""
    heads = len(shard.heads) if shard else spec.num_heads
    kv_heads = len(shard.kv_heads) if shard else spec.num_kv_heads
    q, kv = heads * spec.head_dim, kv_heads * spec.head_dim
    hidden, inter = spec.hidden_size, len(shard.intermediate) if shard else spec.intermediate_size
    return {
        "q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden),
        "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden),
    }  # fmt: skip


@dataclass
class LoraAdapter:
    """One adapter's weights: ``weights[(layer, fused)][sub] = (A [r, in], B [out_sub, r] * scale)``."""

    rank: int
    weights: dict[tuple[int, str], dict[int, tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)


def read_adapter_config(folder: Path) -> dict[str, Any]:
    config_file = folder / "adapter_config.json"
    try:  # a name too long or with a NUL byte raises instead of answering False
        is_folder, has_config = folder.is_dir(), config_file.is_file()
    except (OSError, ValueError) as exc:
        raise LoraError(f"adapter path {str(folder)[:256]!r} cannot be read: {exc}", param="path") from None
    if not is_folder:
        raise LoraError(f"adapter path {str(folder)!r} is not a folder", param="path")
    if not has_config:
        raise LoraError(f"adapter path {str(folder)!r} has no adapter_config.json (not a PEFT adapter)", param="path")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise LoraError(f"adapter path {str(folder)!r}: cannot read adapter_config.json: {exc}", param="path") from None
    if not isinstance(config, dict):
        raise LoraError(f"adapter path {str(folder)!r}: adapter_config.json is not a JSON object", param="path")
    return config


def _check_supported(config: dict[str, Any], path: Path) -> tuple[int, float]:
    """``(rank, scale)`` of a plain LoRA config; anything else is refused naming the field."""
    where = _where(path)
    if config.get("peft_type", "LORA") != "LORA":
        raise LoraError(f"{where}: peft_type {config.get('peft_type')!r} is not supported, only LORA", param="path")
    for key, ok in (
        ("use_dora", not config.get("use_dora")),
        ("bias", config.get("bias", "none") == "none" and not config.get("lora_bias")),
        ("modules_to_save", not config.get("modules_to_save")),
        ("fan_in_fan_out", not config.get("fan_in_fan_out")),
        ("rank_pattern", not config.get("rank_pattern")),
        ("alpha_pattern", not config.get("alpha_pattern")),
    ):
        if not ok:
            raise LoraError(f"{where}: adapter_config.json sets {key}={config.get(key)!r}, which is not supported",
                            param="path")  # fmt: skip
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise LoraError(f"{where}: adapter_config.json needs a positive integer r, got {rank!r}", param="path")
    alpha = float(config.get("lora_alpha", rank))
    return rank, alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def read_rank(folder: str | Path) -> int:
    """The adapter's rank from its config alone (checked against ``max_lora_rank`` before reading weights)."""
    path = Path(folder)
    return _check_supported(read_adapter_config(path), path)[0]


def _where(path: Path) -> str:
    return f"adapter path {str(path)!r}"


def _place(key: str, num_layers: int, where: str) -> tuple[int, str, str]:
    """``(layer, hf_projection, "A"|"B")`` of a PEFT tensor name."""
    name = key.removeprefix("base_model.model.").removeprefix("model.")
    parts = name.split(".")
    # layers.{i}.{self_attn|mlp}.{proj}.lora_{A|B}.weight
    if len(parts) == 6 and parts[0] == "layers" and parts[4] in ("lora_A", "lora_B") and parts[5] == "weight":
        layer, proj = parts[1], parts[3]
        if layer.isdigit() and int(layer) < num_layers and proj in _PLACE:
            return int(layer), proj, parts[4][-1]
    raise LoraError(f"{where}: tensor {key!r} targets nothing this engine adapts (q/k/v/o, gate/up/down per layer)",
                    param="path")  # fmt: skip


def load_adapter(
    folder: str | Path, spec: DecoderSpec, dtype: torch.dtype, shard: TensorShard | None = None
) -> LoraAdapter:
    """The adapter at ``folder`` for a model of ``spec`` (a rank's share of it under tensor parallelism: ``B``
    cut like a column-parallel weight's rows, ``A`` like a row-parallel weight's columns); every mismatch is a
    :class:`LoraError` naming it."""
    path = Path(folder)
    rank, scale = _check_supported(read_adapter_config(path), path)
    where = _where(path)
    weights_file = path / "adapter_model.safetensors"
    if not weights_file.is_file():
        raise LoraError(f"{where} has no adapter_model.safetensors", param="path")
    try:
        tensors = load_file(str(weights_file))
    except (OSError, SafetensorError) as exc:
        raise LoraError(f"{where}: cannot read adapter_model.safetensors: {exc}", param="path") from None
    shapes = projection_shapes(spec)
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        layer, proj, which = _place(key, spec.num_layers, where)
        in_features, out_features = shapes[proj]
        expected = (rank, in_features) if which == "A" else (out_features, rank)
        if tuple(tensor.shape) != expected:
            raise LoraError(f"{where}: tensor {key!r} has shape {tuple(tensor.shape)}, expected {expected} (r={rank})",
                            param="path")  # fmt: skip
        pairs.setdefault((layer, proj), {})[which] = tensor
    if not pairs:
        raise LoraError(f"{where}: adapter_model.safetensors holds no LoRA tensors", param="path")
    adapter = LoraAdapter(rank)
    for (layer, proj), pair in sorted(pairs.items()):
        if set(pair) != {"A", "B"}:
            raise LoraError(f"{where}: layer {layer} {proj} has lora_{''.join(pair)} but not both", param="path")
        fused, sub = _PLACE[proj]
        a, b = pair["A"], pair["B"]
        if shard is not None:  # the cut of the weight this pair adapts (shard_tensor's rules by projection name)
            name = f"layers.{layer}.{proj}.weight"
            if proj in ROW_PARALLEL:
                a = shard_tensor(shard, name, a, spec.head_dim)
            else:
                b = shard_tensor(shard, name, b, spec.head_dim)
        a = a.to(dtype)
        b = (b.float() * scale).to(dtype)
        adapter.weights.setdefault((layer, fused), {})[sub] = (a, b)
    return adapter
