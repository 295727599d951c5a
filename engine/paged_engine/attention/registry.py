"""Attention backends by name, so a deployment picks one with a string (``--attention-backend cpu``).

Backends register a factory rather than an instance: a C++ or CUDA backend may fail to import on a machine
without its toolchain, and that must only matter when it is actually selected. Which one serves a model (and
what ``auto`` means) is decided by ``selection.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from paged_engine.attention.backend import AttentionBackend

BackendFactory = Callable[[], AttentionBackend]

_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``factory`` selectable as ``name``; re-registering a name replaces the previous factory."""
    if not name:
        raise ValueError("attention backend name must be non-empty")
    _REGISTRY[name] = factory


def available_backends() -> list[str]:
    return sorted(_REGISTRY)


def get_backend(name: str) -> AttentionBackend:
    """Instantiate the backend registered as ``name``; unknown names list what is available."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(available_backends())}") from None
    return factory()


def _reference() -> AttentionBackend:
    from paged_engine.attention.reference import TorchReferenceBackend

    return TorchReferenceBackend()


register_backend("reference", _reference)


def _cpu() -> AttentionBackend:
    from paged_engine.attention.cpu import CpuKernelBackend

    return CpuKernelBackend()


def _cuda() -> AttentionBackend:
    from paged_engine.attention.cuda import CudaKernelBackend

    return CudaKernelBackend()


register_backend("cpu", _cpu)
register_backend("cuda", _cuda)
