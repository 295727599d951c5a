"""Generated LLM traffic: a time-varying arrival rate, bursty inter-arrivals and heavy-tailed lengths.

Arrivals are a gamma renewal process in *operational time* (the integral of the rate profile), mapped
back to wall time, so the rate follows the profile while ``burstiness`` (the gamma shape) sets the
inter-arrival dispersion: shape 1 is Poisson, below 1 requests clump (coefficient of variation
``1/sqrt(shape)``). Published production traces report clumping well beyond Poisson (BurstGPT fits
gamma inter-arrivals with shape below 1; the Azure LLM inference traces show minute-scale bursts on
top of a diurnal cycle) and lognormal-like, heavy-tailed prompt and output lengths, which is what
``PRODUCTION_LENGTHS`` reproduces (conversation-like medians of ~1k prompt and ~130 output tokens).
Everything is seeded and generated here: no trace is downloaded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

RateProfile = Callable[[float], float]
"""Arrival rate in requests/s at time t (seconds from the start)."""


@dataclass(frozen=True)
class RequestSpec:
    arrival: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LengthModel:
    """Lognormal lengths with a median and a log-space sigma, clipped to ``[low, high]`` tokens."""

    median: float
    sigma: float
    low: int
    high: int

    def __post_init__(self) -> None:
        if not (self.median > 0 and self.sigma >= 0 and 1 <= self.low <= self.high):
            raise ValueError(f"invalid length model {self}")

    def draw(self, rng: random.Random) -> int:
        value = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0)) if self.sigma else self.median
        return int(min(self.high, max(self.low, round(value))))


@dataclass(frozen=True)
class Lengths:
    prompt: LengthModel
    output: LengthModel


#: Conversation-like lengths: prompt median 1020, output median 129, both heavy-tailed.
PRODUCTION_LENGTHS = Lengths(LengthModel(1020, 0.9, 16, 8192), LengthModel(129, 0.9, 1, 2048))
#: Narrower lengths for the synthetic shapes (step, ramp, diurnal): the load shape is what they test.
MODERATE_LENGTHS = Lengths(LengthModel(700, 0.5, 16, 4096), LengthModel(128, 0.5, 1, 1024))


def generate(
    profile: RateProfile,
    duration_s: float,
    *,
    lengths: Lengths,
    burstiness: float = 1.0,
    seed: int = 0,
    resolution_s: float = 1.0,
) -> list[RequestSpec]:
    """Requests arriving over ``[0, duration_s)`` with rate ``profile``; sorted by arrival."""
    if not (burstiness > 0 and duration_s > 0 and resolution_s > 0):
        raise ValueError("burstiness, duration_s and resolution_s must be positive")
    rng = random.Random(seed)
    # Cumulative operational time at each resolution step (piecewise-constant rate).
    steps = math.ceil(duration_s / resolution_s)
    cumulative = [0.0]
    for i in range(steps):
        rate = profile(i * resolution_s)
        if rate < 0:
            raise ValueError(f"rate profile is negative ({rate}) at t={i * resolution_s:g} s")
        cumulative.append(cumulative[-1] + rate * resolution_s)
    requests: list[RequestSpec] = []
    op, index = 0.0, 0
    while True:
        op += rng.gammavariate(burstiness, 1.0 / burstiness)  # mean 1 in operational time
        while index < steps and cumulative[index + 1] < op:
            index += 1
        if index >= steps:
            return requests
        span = cumulative[index + 1] - cumulative[index]
        t = (index + (op - cumulative[index]) / span) * resolution_s
        requests.append(RequestSpec(t, lengths.prompt.draw(rng), lengths.output.draw(rng)))


def step(before: float, after: float, at: float) -> RateProfile:
    return lambda t: before if t < at else after


def ramp(start: float, end: float, begin: float, length: float) -> RateProfile:
    return lambda t: start + (end - start) * min(1.0, max(0.0, (t - begin) / length))


def diurnal(
    low: float, high: float, period_s: float, bursts: tuple[tuple[float, float, float], ...] = ()
) -> RateProfile:
    """One compressed day: a cosine from ``low`` (t=0) to ``high`` (mid-period) and back; ``bursts`` are
    ``(start_s, length_s, factor)`` multiplying the rate while they last."""

    def rate(t: float) -> float:
        base = low + (high - low) * 0.5 * (1.0 - math.cos(2.0 * math.pi * t / period_s))
        factor = math.prod(f for start, length, f in bursts if start <= t < start + length)
        return base * factor

    return rate
