"""The shared-memory broadcast ring: every reader gets every message, in order, whole, however long, and the
writer never overwrites a piece a reader has not read."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_engine.executor.shm_ring import BroadcastRing, RingReader, RingTimeout


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=700), min_size=1, max_size=40), st.integers(1, 3))
def test_every_reader_gets_every_message_in_order(messages, num_readers):
    ring = BroadcastRing.create(num_readers, num_slots=3, slot_bytes=256)  # messages span and wrap the slots
    try:
        got: list[list[bytes]] = [[] for _ in range(num_readers)]

        def read(index: int) -> None:
            reader = RingReader(ring, index)
            got[index].extend(reader.read(timeout_s=10) for _ in messages)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(num_readers)]
        for thread in threads:
            thread.start()
        for message in messages:
            ring.write(message, timeout_s=10)
        for thread in threads:
            thread.join(10)
        assert got == [messages] * num_readers
    finally:
        ring.close(unlink=True)


def test_the_writer_waits_for_a_slow_reader_and_times_out_naming_it():
    ring = BroadcastRing.create(2, num_slots=2, slot_bytes=16)
    try:
        fast = RingReader(ring, 0)
        for message in (b"one", b"two"):
            ring.write(message)
            assert fast.read(timeout_s=1) == message
        with pytest.raises(RingTimeout, match="the workers to read"):
            ring.write(b"three", timeout_s=0.2)  # reader 1 never read "one": its slot is not free
        slow = RingReader(ring, 1)
        assert [slow.read(timeout_s=1), slow.read(timeout_s=1)] == [b"one", b"two"]
    finally:
        ring.close(unlink=True)


def test_a_reader_times_out_with_nothing_written_and_check_can_end_the_wait():
    ring = BroadcastRing.create(1, num_slots=2, slot_bytes=16)
    try:
        with pytest.raises(RingTimeout):
            RingReader(ring, 0).read(timeout_s=0.05)

        def peer_gone() -> None:
            raise RuntimeError("writer died")

        with pytest.raises(RuntimeError, match="writer died"):
            RingReader(ring, 0).read(timeout_s=5, check=peer_gone)
    finally:
        ring.close(unlink=True)
