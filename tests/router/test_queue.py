"""The bounded per-model admission queue: FIFO hand-over, size bound, timeout, and no lease lost."""

from __future__ import annotations

import asyncio

import pytest
from paged_platform.router.queue import AdmissionQueue, QueueFullError, QueueTimeoutError


class Slots:
    """``free`` leases to hand out; a released lease frees its slot."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.given = 0

    def pick(self) -> Lease | None:
        if self.free == 0:
            return None
        self.free -= 1
        self.given += 1
        return Lease(self)


class Lease:
    def __init__(self, slots: Slots) -> None:
        self.slots = slots

    def release(self) -> None:
        self.slots.free += 1


async def test_admits_at_once_while_there_is_room():
    slots, queue = Slots(2), AdmissionQueue[Lease](max_size=0, timeout=1)
    await queue.admit(slots.pick)
    await queue.admit(slots.pick)
    with pytest.raises(QueueFullError):
        await queue.admit(slots.pick)


async def test_waiters_are_served_in_arrival_order_as_room_appears():
    slots, queue = Slots(0), AdmissionQueue[Lease](max_size=3, timeout=5)
    order: list[int] = []

    async def one(i: int) -> None:
        await queue.admit(slots.pick)
        order.append(i)

    tasks = [asyncio.create_task(one(i)) for i in range(3)]
    await asyncio.sleep(0.01)
    assert len(queue) == 3
    with pytest.raises(QueueFullError):
        await queue.admit(slots.pick)
    for _ in range(3):
        slots.free += 1
        queue.wake()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert len(queue) == 0


async def test_a_new_arrival_does_not_overtake_the_waiters():
    slots, queue = Slots(0), AdmissionQueue[Lease](max_size=2, timeout=5)
    first = asyncio.create_task(queue.admit(slots.pick))
    await asyncio.sleep(0.01)
    slots.free = 1  # room appeared but nobody woke the queue yet
    second = asyncio.create_task(queue.admit(slots.pick))
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done()
    queue.wake()
    await asyncio.wait_for(first, 1)
    assert not second.done()
    second.cancel()


async def test_times_out_and_leaves_the_queue():
    slots, queue = Slots(0), AdmissionQueue[Lease](max_size=1, timeout=0.05)
    with pytest.raises(QueueTimeoutError):
        await queue.admit(slots.pick)
    assert len(queue) == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_a_lease_handed_to_it_is_returned():
    slots, queue = Slots(0), AdmissionQueue[Lease](max_size=2, timeout=5)
    waiter = asyncio.create_task(queue.admit(slots.pick))
    await asyncio.sleep(0.01)
    slots.free = 1
    queue.wake()  # the lease is handed over...
    waiter.cancel()  # ...in the same instant as the caller leaves
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.free == 1
    assert len(queue) == 0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="queue size must be >= 0"):
        AdmissionQueue(max_size=-1, timeout=1)
    with pytest.raises(ValueError, match="queue timeout must be > 0"):
        AdmissionQueue(max_size=1, timeout=0)
