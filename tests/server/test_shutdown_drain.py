"""ShutdownDrain: when a server that got SIGTERM may stop listening."""

from __future__ import annotations

import signal

import pytest
from paged_engine.server import shutdown
from paged_engine.server.shutdown import ShutdownDrain


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(shutdown.time, "monotonic", fake.monotonic)
    return fake


def test_sigterm_drains_until_nothing_is_in_flight(clock: Clock) -> None:
    in_flight = [2]
    drained: list[bool] = []
    drain = ShutdownDrain(30.0, lambda: in_flight[0], lambda: drained.append(True) or True)
    assert not drain.done()  # no signal yet
    assert drain.on_signal(signal.SIGTERM) and drained == [True]
    clock.now += 10
    assert not drain.done() and drain.remaining_s() == 20.0
    in_flight[0] = 0
    assert drain.done()


def test_the_grace_period_bounds_the_drain(clock: Clock) -> None:
    drain = ShutdownDrain(30.0, lambda: 5, lambda: True)
    drain.on_signal(signal.SIGTERM)
    clock.now += 29.9
    assert not drain.done()
    clock.now += 0.2
    assert drain.done() and drain.remaining_s() == 0.0


def test_sigint_a_second_sigterm_or_nothing_loaded_stop_at_once(clock: Clock) -> None:
    assert not ShutdownDrain(30.0, lambda: 1, lambda: True).on_signal(signal.SIGINT)
    assert not ShutdownDrain(30.0, lambda: 1, lambda: False).on_signal(signal.SIGTERM)  # still loading
    drain = ShutdownDrain(30.0, lambda: 1, lambda: True)
    assert drain.on_signal(signal.SIGTERM)
    assert not drain.on_signal(signal.SIGTERM)
