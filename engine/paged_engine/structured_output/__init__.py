"""Structured output: constraints on what a request may generate, enforced as a token bitmask in the sampler.

The constraint itself (``StructuredOutputParams``) is pure and travels inside ``SamplingParams``; ``grammar``
(xgrammar) checks and compiles it where it is used (the API server checks, the engine core compiles), and
``paged_engine.sample.grammar_mask`` applies it per step.
"""

from paged_engine.sampling_params import StructuredOutputParams

__all__ = ["StructuredOutputParams"]
