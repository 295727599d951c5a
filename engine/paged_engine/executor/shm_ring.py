"""A broadcast ring in shared memory: one writer (the engine core) and ``num_readers`` readers (the workers of one
host), so a step's input is written once and every rank reads it without a socket hop.

Layout: ``num_slots`` slots, each a header (sequence number, payload length, "more pieces follow", one done-flag
per reader) and ``slot_bytes`` of payload. Invariants:
- message pieces are numbered 1, 2, ...; piece ``s`` lives in slot ``(s - 1) % num_slots``;
- the writer publishes a piece by writing its sequence number last, after the payload and after clearing the
  done-flags, so a reader that sees sequence ``s`` sees the whole piece (x86's stores are not reordered);
- the writer reuses a slot only when every reader has set its done-flag for the piece it holds, so no reader ever
  misses a piece; a message longer than a slot spans consecutive pieces.
Waiting spins briefly, then sleeps with a growing back-off (an idle worker wakes about a thousand times a second),
and calls ``check`` now and then so a dead peer ends the wait.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from multiprocessing import shared_memory

_HEADER = struct.Struct("<qqq")  # sequence, payload bytes, more pieces follow
SPIN_POLLS = 200
MAX_SLEEP_S = 0.001
CHECK_EVERY_S = 0.1


class RingTimeout(TimeoutError):
    """The peer did not write (or read) within the time given."""


def _wait(ready: Callable[[], bool], timeout_s: float | None, check: Callable[[], None] | None, what: str) -> None:
    for _ in range(SPIN_POLLS):
        if ready():
            return
    start = last_check = time.monotonic()
    sleep = 0.0
    while not ready():
        time.sleep(sleep)
        sleep = min(MAX_SLEEP_S, sleep * 2 or 1e-5)
        now = time.monotonic()
        if timeout_s is not None and now - start > timeout_s:
            raise RingTimeout(f"timed out after {timeout_s:g} s waiting for {what}")
        if check is not None and now - last_check > CHECK_EVERY_S:
            check()
            last_check = now


class BroadcastRing:
    def __init__(self, shm: shared_memory.SharedMemory, num_readers: int, num_slots: int, slot_bytes: int) -> None:
        self.shm, self.num_readers, self.num_slots, self.slot_bytes = shm, num_readers, num_slots, slot_bytes
        self.flags_bytes = -(-num_readers // 8) * 8
        self.stride = _HEADER.size + self.flags_bytes + slot_bytes
        self.buf = shm.buf
        self.next_seq = 1

    @classmethod
    def create(cls, num_readers: int, num_slots: int = 8, slot_bytes: int = 1 << 20) -> BroadcastRing:
        flags = -(-num_readers // 8) * 8
        shm = shared_memory.SharedMemory(create=True, size=num_slots * (_HEADER.size + flags + slot_bytes))
        shm.buf[:] = bytes(shm.size)
        return cls(shm, num_readers, num_slots, slot_bytes)

    @classmethod
    def attach(cls, name: str, num_readers: int, num_slots: int, slot_bytes: int) -> BroadcastRing:
        # A spawned reader shares its creator's resource tracker, which unlinks the segment once, at the end.
        return cls(shared_memory.SharedMemory(name=name), num_readers, num_slots, slot_bytes)

    @property
    def name(self) -> str:
        return self.shm.name

    def _offset(self, seq: int) -> int:
        return ((seq - 1) % self.num_slots) * self.stride

    def _all_done(self, base: int) -> bool:
        flags = base + _HEADER.size
        return all(self.buf[flags : flags + self.num_readers])

    # ---- the writer --------------------------------------------------------------------------------------------

    def write(self, data: bytes, timeout_s: float | None = None, check: Callable[[], None] | None = None) -> None:
        view = memoryview(data)
        pieces = [view[i : i + self.slot_bytes] for i in range(0, len(view), self.slot_bytes)] or [view]
        for index, piece in enumerate(pieces):
            seq = self.next_seq
            base = self._offset(seq)
            if seq > self.num_slots:
                _wait(lambda b=base: self._all_done(b), timeout_s, check, "the workers to read the step before")
            payload = base + _HEADER.size + self.flags_bytes
            self.buf[payload : payload + len(piece)] = piece
            flags = base + _HEADER.size
            self.buf[flags : flags + self.num_readers] = bytes(self.num_readers)
            _HEADER.pack_into(self.buf, base, 0, len(piece), index < len(pieces) - 1)
            struct.pack_into("<q", self.buf, base, seq)  # publish last
            self.next_seq += 1

    def unread_by(self) -> list[int]:
        """The readers that have not read the last piece written (all of them before any is written)."""
        if self.next_seq == 1:
            return list(range(self.num_readers))
        flags = self._offset(self.next_seq - 1) + _HEADER.size
        return [i for i in range(self.num_readers) if not self.buf[flags + i]]

    def close(self, unlink: bool = False) -> None:
        self.buf = None  # type: ignore[assignment]
        self.shm.close()
        if unlink:
            self.shm.unlink()


class RingReader:
    """Reader ``index``'s view of a ring: the pieces in order, from the first."""

    def __init__(self, ring: BroadcastRing, index: int) -> None:
        self.ring, self.index = ring, index
        self.expected = 1

    def read(self, timeout_s: float | None = None, check: Callable[[], None] | None = None) -> bytes:
        ring, parts = self.ring, []
        while True:
            base = ring._offset(self.expected)
            seq = self.expected
            published = lambda b=base, s=seq: struct.unpack_from("<q", ring.buf, b)[0] == s  # noqa: E731
            _wait(published, timeout_s, check, "the next step")
            _, size, more = _HEADER.unpack_from(ring.buf, base)
            payload = base + _HEADER.size + ring.flags_bytes
            parts.append(bytes(ring.buf[payload : payload + size]))
            ring.buf[base + _HEADER.size + self.index] = 1
            self.expected += 1
            if not more:
                return b"".join(parts)
