"""Attention over the paged KV cache: the backend interface, a torch reference backend, our CPU and CUDA kernel
backends, FlashAttention for prefill, and the choice among them (``selection``). Runs where the model runs: the
engine-core process (a worker process per device once there are several)."""

from paged_engine.attention.backend import AttentionBackend, AttentionMetadata
from paged_engine.attention.registry import available_backends, get_backend, register_backend

__all__ = ["AttentionBackend", "AttentionMetadata", "available_backends", "get_backend", "register_backend"]
