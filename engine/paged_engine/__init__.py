"""paged: a paged-KV-cache inference engine."""

from paged_engine.sampling_params import SamplingParams

__all__ = ["SamplingParams"]
