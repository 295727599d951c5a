"""When each request is sent: a Poisson or gamma arrival process, or everything at once.

Inter-arrival gaps are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``: shape 1 is a
Poisson process; below 1 requests come in bursts, above 1 they are more evenly spaced. An infinite rate
sends every request at time 0 (useful with a concurrency cap).
"""

from __future__ import annotations

import math
import random


def arrival_offsets(num_requests: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Send offsets in seconds from the start, non-decreasing, the first at 0."""
    if num_requests < 0:
        raise ValueError(f"number of requests must be >= 0, got {num_requests}")
    if not rate > 0:
        raise ValueError(f"request rate must be > 0 requests/s (or inf), got {rate}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness must be a finite number > 0, got {burstiness}")
    if math.isinf(rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)  # mean gap = shape * scale = 1 / rate
    offsets, now = [], 0.0
    for index in range(num_requests):
        if index:
            now += rng.gammavariate(burstiness, scale)
        offsets.append(now)
    return offsets
