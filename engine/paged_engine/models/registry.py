"""Architecture name (``config.architectures[0]``) -> model builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from paged_engine.models.decoder import DecoderForCausalLM, DecoderSpec
from paged_engine.models.gemma3 import gemma3_spec
from paged_engine.models.llama import llama_family_spec
from paged_engine.parallel.layout import PipelineStage, TensorShard

_SPECS: dict[str, Callable[[Any], DecoderSpec]] = {
    "LlamaForCausalLM": llama_family_spec,
    "MistralForCausalLM": llama_family_spec,
    "Qwen2ForCausalLM": llama_family_spec,
    "Qwen3ForCausalLM": llama_family_spec,
    "Gemma3ForCausalLM": gemma3_spec,
}


def supported_architectures() -> list[str]:
    return sorted(_SPECS)


def spec_from_config(config: Any) -> DecoderSpec:
    """The decoder spec for a transformers config; unknown architectures list the supported ones."""
    archs = list(getattr(config, "architectures", None) or [])
    for arch in archs:
        if arch in _SPECS:
            config.architectures = [arch]
            return _SPECS[arch](config)
    raise ValueError(
        f"unsupported architecture {archs or '(none given in config.json)'}; "
        f"supported: {', '.join(supported_architectures())}"
    )


def build_model(
    config: Any,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    rank: int = 0,
    tp_size: int = 1,
    pp_size: int = 1,
) -> DecoderForCausalLM:
    """An uninitialised model (weights allocated, not filled) ready for ``load_weights``; above one rank, rank
    ``rank``'s share of it: stage ``rank // tp_size``'s layers, cut ``tp_size`` ways (its process must have
    joined the ranks' group: ``parallel.collectives``)."""
    spec = spec_from_config(config)
    tp = pp = None
    if tp_size > 1 or pp_size > 1:
        from paged_engine.parallel.collectives import PipelineParallel, TensorParallel, tensor_groups

        groups = tensor_groups(tp_size, pp_size)  # every rank creates every group
        stage_rank, tp_rank = divmod(rank, tp_size)
        if tp_size > 1:
            shard = TensorShard(tp_rank, tp_size, spec.num_heads, spec.num_kv_heads, spec.intermediate_size,
                                spec.vocab_size)  # fmt: skip
            tp = TensorParallel(shard, torch.device(device), groups[stage_rank])
        if pp_size > 1:
            pp = PipelineParallel(PipelineStage(stage_rank, pp_size, spec.num_layers), tp_size, torch.device(device))
    with torch.device("meta"):
        model = DecoderForCausalLM(spec, tp, pp)
    model = model.to(dtype).to_empty(device=device)
    model.reset_buffers()
    return model.eval()
