"""One request's trip upstream: a replica from the pool, retries before the first byte, the body relayed as it
arrives.

Retried on another replica (at most ``max_retries`` times, never one already tried): a connection that could
not be made or was closed before any response, and a 503 (a draining or overloaded engine refused it). Both
mean the engine did no work for the request, so sending it again cannot duplicate anything. Either also marks
the replica not ready until its next probe. Once the status line has arrived nothing is retried.

The relay never buffers: each chunk the replica sends is passed on as it comes. If the client leaves, the
upstream connection is closed, which the engine sees as a disconnect and aborts the request (freeing its KV
blocks). If the replica fails mid-stream, an SSE response ends with an error event (OpenAI's envelope, or
Anthropic's ``event: error`` on the Messages API), so clients see an error rather than a silently short answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from paged_platform.router.errors import RouterError, error_body
from paged_platform.router.metrics import RouterMetrics
from paged_platform.router.policies import RouteRequest
from paged_platform.router.pool import Lease, ReplicaPool
from paged_platform.router.queue import QueueFullError, QueueTimeoutError
from paged_platform.router.tracing import RouteSpan

log = logging.getLogger("paged_router")

#: Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus those the client library sets.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer"}
    | {"transfer-encoding", "upgrade", "host", "content-length"}
)
#: Seconds a client is told to wait before trying again when the router itself refuses.
RETRY_AFTER_S = 1


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers minus hop-by-hop ones: authorization and content type reach the engine unchanged;
    the trace context is then the router's span's (``tracing.RouteSpan.upstream_headers``), or the client's
    with tracing off."""
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


def response_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP or k.lower() == "content-length"}


@dataclass
class Upstream:
    """The replica's response, the lease it runs under, and how many other replicas refused it first."""

    lease: Lease
    response: aiohttp.ClientResponse
    retries: int = 0


def _queue_error(exc: Exception, model: str, pool: ReplicaPool) -> RouterError:
    queue = pool.queue(model)
    if isinstance(exc, QueueFullError):
        return RouterError(
            429,
            f"too many requests for model {model!r}: {queue.max_size} are already waiting for a replica",
            type="rate_limit_error",
            reason="queue_full",
            retry_after=RETRY_AFTER_S,
        )
    ready = sum(r.ready for r in pool.replicas.values())
    return RouterError(
        503,
        f"no replica of model {model!r} could take the request within {queue.timeout:g} s "
        f"({ready} of {len(pool.replicas)} replicas ready)",
        type="unavailable_error",
        reason="queue_timeout",
        retry_after=RETRY_AFTER_S,
    )


async def open_upstream(
    pool: ReplicaPool,
    session: aiohttp.ClientSession,
    metrics: RouterMetrics,
    request: RouteRequest,
    path: str,
    body: bytes,
    headers: dict[str, str],
    max_retries: int,
) -> Upstream:
    """A replica's response whose status line has arrived; raises RouterError when none could be had."""
    try:
        lease = await pool.lease(request)
    except (QueueFullError, QueueTimeoutError) as exc:
        raise _queue_error(exc, request.model, pool) from None
    tried: set[str] = set()
    refusal: aiohttp.ClientResponse | None = None
    while True:
        tried.add(lease.url)
        metrics.requests.labels(request.model, lease.url, lease.decision.reason).inc()
        try:
            response = await session.post(f"{lease.url}{path}", data=body, headers=headers)
        except (aiohttp.ClientConnectionError, aiohttp.ConnectionTimeoutError) as exc:
            failure, detail = "connect_error", f"{type(exc).__name__}: {exc}"
        except BaseException:  # cancelled (the client left) or a bug: give the replica's room back
            if refusal is not None:
                refusal.close()
            lease.release()
            raise
        else:
            if response.status != 503:
                if refusal is not None:
                    refusal.close()
                return Upstream(lease, response, len(tried) - 1)
            failure, detail = "unavailable", "answered 503"
            if refusal is not None:
                refusal.close()
            refusal = response
        pool.mark_unready(lease.url, f"{failure} ({detail})")
        retry = pool.try_lease(request, excluded=frozenset(tried)) if len(tried) <= max_retries else None
        if retry is None:
            if refusal is not None:
                return Upstream(lease, refusal, len(tried) - 1)  # the engine's own 503 and its reason, relayed
            lease.release()
            raise RouterError(
                503,
                f"no replica of model {request.model!r} could be reached (tried {len(tried)}; last: {detail})",
                type="unavailable_error",
                reason="upstream_unavailable",
                retry_after=RETRY_AFTER_S,
            )
        log.info("retrying on %s after %s from %s", retry.url, failure, lease.url)
        metrics.retries.labels(request.model, failure).inc()
        lease.release()
        lease = retry


def stream_error_event(message: str, anthropic: bool = False) -> bytes:
    """An SSE event its clients raise as an error: Anthropic's is named ``error``, OpenAI's is plain data."""
    data = b"data: " + error_body(502, message, "upstream_error", anthropic=anthropic) + b"\n\n"
    return b"event: error\n" + data if anthropic else data


async def relay(
    upstream: Upstream, pool: ReplicaPool, metrics: RouterMetrics, span: RouteSpan, anthropic: bool = False
) -> AsyncIterator[bytes]:
    """The response body chunk by chunk; closing the upstream connection and ending ``span`` however it ends."""
    response, lease = upstream.response, upstream.lease
    is_sse = response.content_type == "text/event-stream"
    tail = b"\n\n"
    try:
        async for chunk in response.content.iter_any():
            tail = chunk[-2:]
            yield chunk
    except (TimeoutError, aiohttp.ClientError) as exc:
        log.warning("replica %s failed mid-response: %s", lease.url, exc)
        pool.mark_unready(lease.url, f"failed mid-stream ({type(exc).__name__})")
        metrics.stream_errors.labels(lease.model, lease.url).inc()
        span.failed("stream_error", f"replica failed mid-stream: {type(exc).__name__}")
        if is_sse:
            message = f"the replica serving this request failed mid-stream ({type(exc).__name__}); retry the request"
            yield (b"" if tail == b"\n\n" else b"\n\n") + stream_error_event(message, anthropic)
    finally:
        response.close()
        lease.release()
        span.end()
