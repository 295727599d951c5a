"""SIGTERM as Kubernetes sends it: keep listening, refuse new work with 503, let in-flight requests finish.

A pod's endpoints are removed while it terminates, but load balancers and clients holding connections keep
sending for a few seconds. Closing the listening socket at once (what uvicorn does on a signal) turns those
into connection errors; answering them 503 + Retry-After tells a client to retry elsewhere.

Invariants: the server drains for at most ``grace_s`` after the first SIGTERM, and stops as soon as nothing is
in flight; a second signal (or SIGINT) stops it at once, as before.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

log = logging.getLogger("paged_engine.server")


class ShutdownDrain:
    """Decides, tick by tick, when a server that got SIGTERM may stop listening."""

    def __init__(self, grace_s: float, in_flight: Callable[[], int], start_draining: Callable[[], bool]) -> None:
        """``start_draining()`` stops admission; it returns False when there is nothing to drain (not loaded)."""
        self.grace_s = grace_s
        self._in_flight = in_flight
        self._start_draining = start_draining
        self.started: float | None = None

    def on_signal(self, sig: int) -> bool:
        """True when this signal starts a drain (the caller then keeps serving); False: stop now."""
        if sig != signal.SIGTERM or self.started is not None or not self._start_draining():
            return False
        self.started = time.monotonic()
        log.info("SIGTERM: refusing new requests, waiting up to %.0fs for %d in flight", self.grace_s,
                 self._in_flight())  # fmt: skip
        return True

    def remaining_s(self) -> float:
        assert self.started is not None
        return max(0.0, self.grace_s - (time.monotonic() - self.started))

    def done(self) -> bool:
        """Whether a drain that started is over: nothing in flight, or the grace period spent."""
        return self.started is not None and (self._in_flight() == 0 or self.remaining_s() == 0.0)
