"""Batched sampling: metadata built once per step, one sampler call over every sampling row. Runs in the
engine-core process, on the rank that samples."""

from paged_engine.sample.grammar_mask import StructuredOutput
from paged_engine.sample.logprobs import LogprobsTensors, prompt_logprobs
from paged_engine.sample.metadata import SamplingMetadata, SamplingRow, make_generator
from paged_engine.sample.sampler import Sampler, SamplerOutput

__all__ = [
    "LogprobsTensors",
    "Sampler",
    "SamplerOutput",
    "SamplingMetadata",
    "SamplingRow",
    "StructuredOutput",
    "make_generator",
    "prompt_logprobs",
]
