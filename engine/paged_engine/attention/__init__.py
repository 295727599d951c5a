"""Attention over the paged KV cache: the backend interface, a torch reference backend and a registry."""

from paged_engine.attention.backend import AttentionBackend, AttentionMetadata
from paged_engine.attention.registry import available_backends, get_backend, register_backend

__all__ = ["AttentionBackend", "AttentionMetadata", "available_backends", "get_backend", "register_backend"]
