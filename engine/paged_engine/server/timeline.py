"""One request's life as the API server sees it: arrival, first scheduled, tokens, finish.

It feeds the latency histograms (TTFT, inter-token, end-to-end, queue time), the finish counters and the
request's trace span. Times are wall-clock (``time.time``) because the queue time spans two processes.
"""

from __future__ import annotations

import time

from paged_engine.server.metrics import EngineMetrics
from paged_engine.server.tracing import RequestSpan


class RequestTimeline:
    def __init__(self, metrics: EngineMetrics, span: RequestSpan, prompt_tokens: int) -> None:
        self.metrics = metrics
        self.span = span
        self.prompt_tokens = prompt_tokens
        self.arrival = time.time()
        self.first_scheduled: float | None = None
        self.last_token: float | None = None
        self.done = False

    def scheduled(self, at: float) -> None:
        if self.first_scheduled is None:
            self.first_scheduled = at

    def tokens(self, count: int) -> None:
        t = time.time()
        if self.last_token is None:
            ttft = t - self.arrival
            self.metrics.ttft.observe(ttft)
            self.span.first_token(ttft)
            count -= 1
        elif count > 0:
            gap = (t - self.last_token) / count
            for _ in range(count):
                self.metrics.itl.observe(gap)
        self.last_token = t

    def phase(self, name: str, seconds: float) -> None:
        """Server-side work for this request (e.g. detokenising one output), for the step-time breakdown."""
        self.metrics.observe_phase(name, seconds)

    def finish(self, reason: str, generated: int) -> None:
        if self.done:
            return
        self.done = True
        queue = None if self.first_scheduled is None else max(0.0, self.first_scheduled - self.arrival)
        self.metrics.observe_finished(finish_reason=reason, e2e_seconds=time.time() - self.arrival, queue_seconds=queue)
        self.span.end(reason, self.prompt_tokens, generated)
