"""Step isolation: a failure that can be pinned to one request fails that request, not the engine.

Two kinds of work happen in a step:

* **Per-request work** — adding a request to the persistent batch, its prompt logprobs, building its sampling
  parameters and sampling its row. A failure there is pinned to the request: it is reported in
  ``ModelRunnerOutput.failed``, the scheduler finishes it with an error and frees its blocks, and every other
  request of the batch carries on.
* **Shared work** — building the flat step inputs, the forward pass, block copies. An exception there can't be
  pinned to a request and means the runner's state can't be trusted, so it propagates and stays fatal.

Batched per-request work is tried on the whole batch first (the normal, fast path). Only when that raises is
each item retried alone to find the culprits, so a healthy step pays nothing for the isolation. A retried
item's seeded generator may have advanced in the failed batched attempt: seeded sampling stays correct in
distribution but not bit-for-bit reproducible in a step where another request failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def describe(exc: BaseException) -> str:
    """The message the failed request is answered with."""
    return f"the engine failed while processing this request ({type(exc).__name__}: {exc})"


def report(req_id: str, exc: BaseException, failed: dict[str, str]) -> None:
    """Record ``req_id`` as failed by ``exc`` (with its traceback in the log: this is a bug to fix)."""
    logger.error("request %s failed inside a step; the rest of the batch continues", req_id, exc_info=exc)
    failed[req_id] = describe(exc)


def run_isolated(
    run: Callable[[Sequence[int]], Sequence[T]], items: Sequence[int]
) -> tuple[dict[int, T], dict[int, BaseException]]:
    """``run(items)`` returns one result per item. On an exception, each item is run alone; returns the results
    of the items that succeeded and the exception of each that failed."""
    try:
        results = run(items)
    except Exception as exc:
        if len(items) == 1:
            return {}, {items[0]: exc}
    else:
        return dict(zip(items, results, strict=True)), {}
    ok: dict[int, T] = {}
    errors: dict[int, BaseException] = {}
    for item in items:
        try:
            (ok[item],) = run([item])
        except Exception as exc:
            errors[item] = exc
    return ok, errors
