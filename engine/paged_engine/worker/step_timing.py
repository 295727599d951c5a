"""Where a step's time goes inside the model runner, for the step-time breakdown (``paged_step_phase_seconds``).

Phases: ``prepare`` (state updates, inputs built and copied), ``model`` (the forward pass less attention),
``attention`` (the attention kernels: KV-cache writes and paged attention), ``sample`` (logits and sampling), and
under tensor parallelism ``all_reduce`` (the collectives joining the ranks' shares, taken out of the others).
On a CPU every kernel is synchronous, so wall-clock laps are exact. On a GPU launches return at once: the
forward pass then times its launches, and the wait for the GPU lands in ``sample`` (its first host read), so
there ``attention`` is not measured separately.
"""

from __future__ import annotations

import time

import torch

from paged_engine.attention.backend import AttentionBackend


class TimedAttention(AttentionBackend):
    """Delegates to ``inner`` and adds the time of each call to ``seconds`` (reset by the runner per step)."""

    def __init__(self, inner: AttentionBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0

    def __getattr__(self, attr: str):  # e.g. CudaKernelBackend.use_flash_for_prefill, extension
        return getattr(self.inner, attr)

    def reshape_and_cache(self, *args, **kwargs) -> None:
        start = time.perf_counter()
        self.inner.reshape_and_cache(*args, **kwargs)
        self.seconds += time.perf_counter() - start

    def paged_attention(self, *args, **kwargs) -> None:
        start = time.perf_counter()
        self.inner.paged_attention(*args, **kwargs)
        self.seconds += time.perf_counter() - start

    def copy_blocks(self, key_caches: list[torch.Tensor], value_caches: list[torch.Tensor], block_mapping) -> None:
        self.inner.copy_blocks(key_caches, value_caches, block_mapping)


class StepClock:
    """Laps of one step: ``lap(phase)`` charges the time since the previous lap to ``phase``."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last
        self._last = now

    def skip(self, measured: dict[str, float]) -> None:
        """Take the phases of a part timed by its own clock, and start the next lap after it."""
        for phase, seconds in measured.items():
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self._last = time.perf_counter()
