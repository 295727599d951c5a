"""Model architectures: one parameterised decoder and per-architecture specs built from HF configs. Runs in the
engine-core process."""

from paged_engine.models.decoder import DecoderForCausalLM, DecoderSpec
from paged_engine.models.registry import build_model, spec_from_config, supported_architectures

__all__ = ["DecoderForCausalLM", "DecoderSpec", "build_model", "spec_from_config", "supported_architectures"]
