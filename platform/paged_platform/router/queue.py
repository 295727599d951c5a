"""The bounded wait of one model's requests for a replica with room.

A request first tries to take a replica at once (only when nobody is waiting, so arrivals never overtake the
queue); otherwise it waits, at most ``max_size`` requests at a time and at most ``timeout`` seconds each.
Whenever room may have appeared (a request finished, a replica became ready or joined), :meth:`wake` offers it
to the waiters in arrival order: a waiter whose pick succeeds is handed the lease, the rest keep waiting.
Picking and handing over happen in one synchronous step of the event loop, so a lease is never taken twice; a
lease handed to a waiter that was cancelled or timed out in the same instant is released again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Releasable(Protocol):
    def release(self) -> None: ...


L = TypeVar("L", bound=Releasable)


class QueueFullError(Exception):
    """``max_size`` requests already wait."""


class QueueTimeoutError(Exception):
    """No replica had room within the timeout."""


@dataclass
class _Waiter(Generic[L]):
    pick: Callable[[], L | None]
    future: asyncio.Future[L]


class AdmissionQueue(Generic[L]):
    def __init__(self, max_size: int, timeout: float) -> None:
        if max_size < 0:
            raise ValueError(f"queue size must be >= 0, got {max_size}")
        if not timeout > 0:
            raise ValueError(f"queue timeout must be > 0 seconds, got {timeout}")
        self.max_size = max_size
        self.timeout = timeout
        self._waiters: deque[_Waiter[L]] = deque()

    def __len__(self) -> int:
        return len(self._waiters)

    async def admit(self, pick: Callable[[], L | None]) -> L:
        """A lease from ``pick``, at once or after waiting; raises QueueFullError or QueueTimeoutError."""
        if not self._waiters:
            lease = pick()
            if lease is not None:
                return lease
        if len(self._waiters) >= self.max_size:
            raise QueueFullError
        waiter = _Waiter(pick, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.shield(waiter.future)
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # handed a lease in the same instant as the timeout
            raise QueueTimeoutError from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.result().release()  # the caller left in the same instant it was handed a lease
            raise
        finally:
            waiter.future.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def wake(self) -> None:
        """Offer room to the waiters in arrival order; those whose pick fails stay queued."""
        for waiter in list(self._waiters):
            if waiter.future.done():
                continue
            lease = waiter.pick()
            if lease is not None:
                self._waiters.remove(waiter)
                waiter.future.set_result(lease)
