"""The demand a ModelDeployment's routers report (``ROUTER_QUEUE_DEPTH``, ``ROUTER_ARRIVALS`` in ``metric_names``):
what wakes a fleet at zero and what tells it is idle (``scale_to_zero``).

Every router pod is asked at once, each with its own timeout; the figures are summed over those that answered.
None when none answered: no evidence either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
from paged_platform.metric_names import ROUTER_ARRIVALS, ROUTER_QUEUE_DEPTH
from paged_platform.prometheus_text import parse as parse_text

from paged_operator.policy.scale_to_zero import RouterDemand


def parse(text: str) -> RouterDemand:
    """Sum the two series over their labels (one router serves one ModelDeployment, possibly several names)."""
    samples = parse_text(text)
    held = sum((s.value for s in samples if s.name == ROUTER_QUEUE_DEPTH), 0.0)
    arrivals = sum((s.value for s in samples if s.name == ROUTER_ARRIVALS), 0.0)
    return RouterDemand(held, arrivals)


async def collect(client: httpx.AsyncClient, urls: Sequence[str], *, timeout_s: float) -> RouterDemand | None:
    """``urls``: the routers' ``/metrics``."""

    async def one(url: str) -> RouterDemand | None:
        try:
            async with asyncio.timeout(timeout_s):
                response = await client.get(url, timeout=timeout_s)
            response.raise_for_status()
            return parse(response.text)
        except (TimeoutError, httpx.HTTPError, ValueError):
            return None

    answers = [a for a in await asyncio.gather(*(one(u) for u in urls)) if a is not None]
    if not answers:
        return None
    return RouterDemand(sum(a.held for a in answers), sum(a.arrivals_total for a in answers))
