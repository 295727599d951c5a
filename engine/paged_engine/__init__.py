"""paged: a paged-KV-cache inference engine.

``LLM`` is imported lazily (module ``__getattr__``) so that ``import paged_engine.core`` never imports torch.
"""

from typing import TYPE_CHECKING, Any

from paged_engine.sampling_params import SamplingParams, StructuredOutputParams

if TYPE_CHECKING:
    from paged_engine.entrypoints.llm import LLM

__all__ = ["LLM", "SamplingParams", "StructuredOutputParams"]


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from paged_engine.entrypoints.llm import LLM

        return LLM
    raise AttributeError(f"module 'paged_engine' has no attribute {name!r}")
