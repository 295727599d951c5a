"""``paged-router``: parse and check the flags, then serve (uvicorn, uvloop and httptools where installed)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import uvicorn
from opentelemetry import trace
from starlette.applications import Starlette

from paged_platform.router.app import Limits, Router, build_app
from paged_platform.router.discovery import watch_endpoint_slices
from paged_platform.router.metrics import RouterMetrics
from paged_platform.router.policies import DEFAULT_POLICY, POLICY_NAMES, PolicyParams, make_policy
from paged_platform.router.pool import ReplicaPool
from paged_platform.router.tracing import EXPORTERS, Exporter, configure_tracing

log = logging.getLogger("paged_router")


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    endpoints: tuple[str, ...]
    service: str | None
    namespace: str | None
    kubeconfig: str | None
    port_name: str
    served_models: tuple[str, ...]
    policy: str
    params: PolicyParams
    limits: Limits
    max_in_flight: int
    max_queue: int
    queue_timeout: float
    probe_interval: float
    connect_timeout: float
    read_timeout: float
    log_level: str
    otel_exporter: Exporter = "off"


def _at_least(minimum: float, kind: type = int):  # type: ignore[no-untyped-def]
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g}, got {text}")
        return value

    return parse


def _positive_float(text: str) -> float:
    value = _at_least(0.0, float)(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _endpoint(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a replica base URL like http://127.0.0.1:8001")
    return text.rstrip("/")


def _host(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paged-router", description=__doc__.split("\n")[0])
    p.add_argument("--host", type=_host, default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_at_least(1), default=8080)
    src = p.add_argument_group("replicas (one of)")
    src.add_argument("--endpoint", dest="endpoints", action="append", type=_endpoint, default=[],
                     help="a replica's base URL; repeat for each")  # fmt: skip
    src.add_argument("--service", help="discover replicas from this Service's EndpointSlices")
    src.add_argument("--namespace", help="the Service's namespace (default: the kubeconfig's, or in-cluster)")
    src.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    src.add_argument("--port-name", default="http", help="the EndpointSlice port to use (default http)")
    p.add_argument("--served-model", dest="served_models", action="append", default=[], metavar="NAME",
                   help="a model name the replicas will serve (the base model first, then each adapter); repeat for "
                        "each. Requests for it wait while no replica runs; other names are a 404 at once")  # fmt: skip
    pol = p.add_argument_group("policy")
    pol.add_argument("--policy", choices=POLICY_NAMES, default=DEFAULT_POLICY)
    pol.add_argument("--balance-factor", type=_at_least(1.0, float), default=1.25,
                     help="affinity may load a replica to this many times the mean in-flight count")  # fmt: skip
    pol.add_argument("--load-weight", type=_at_least(0.0, float), default=0.5,
                     help="cache_aware: weight of relative load against the cached-prefix share")  # fmt: skip
    pol.add_argument("--prefix-chunk-chars", type=_at_least(1), default=64,
                     help="characters per hashed prompt chunk (about the engine's block size in text)")  # fmt: skip
    pol.add_argument("--prefix-max-chunks", type=_at_least(1), default=1024, help="chunks hashed per prompt")
    pol.add_argument("--prefix-index-chunks", type=_at_least(1), default=200_000,
                     help="prefix chunks remembered per replica (LRU)")  # fmt: skip
    pol.add_argument("--session-header", default="x-session-id", help="session policy: the affinity header")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-inflight-per-replica", type=_at_least(1), default=256)
    lim.add_argument("--max-queue", type=_at_least(0), default=1024, help="requests waiting per model at most")
    lim.add_argument("--queue-timeout", type=_positive_float, default=30.0,
                     help="seconds a request may wait for a replica with room (cover a replica's start-up when "
                          "the fleet may be at zero)")  # fmt: skip
    lim.add_argument("--max-retries", type=_at_least(0), default=2, help="other replicas tried before the first byte")
    lim.add_argument("--max-body-bytes", type=_at_least(1), default=16 * 1024 * 1024)
    lim.add_argument("--probe-interval", type=_positive_float, default=1.0, help="seconds between replica probes")
    lim.add_argument("--connect-timeout", type=_positive_float, default=5.0)
    lim.add_argument("--read-timeout", type=_positive_float, default=600.0,
                     help="seconds a replica may stay silent mid-response")  # fmt: skip
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--otel-exporter", choices=EXPORTERS, default="off",
                   help="OpenTelemetry spans, one per proxied request: off, console, or otlp "
                        "(to $OTEL_EXPORTER_OTLP_ENDPOINT)")  # fmt: skip
    return p


def parse_options(argv: Sequence[str] | None = None) -> Options:
    p = parser()
    a = p.parse_args(argv)
    if bool(a.endpoints) == bool(a.service):
        p.error("give either --endpoint (one or more) or --service, not both and not neither")
    if not a.service and (a.namespace or a.kubeconfig):
        p.error("--namespace and --kubeconfig apply only with --service")
    return Options(
        host=a.host, port=a.port, endpoints=tuple(dict.fromkeys(a.endpoints)), service=a.service,
        namespace=a.namespace, kubeconfig=a.kubeconfig, port_name=a.port_name,
        served_models=tuple(dict.fromkeys(a.served_models)), policy=a.policy,
        params=PolicyParams(balance=a.balance_factor, load_weight=a.load_weight, index_chunks=a.prefix_index_chunks),
        limits=Limits(max_body_bytes=a.max_body_bytes, max_retries=a.max_retries,
                      prefix_chunk_chars=a.prefix_chunk_chars, prefix_max_chunks=a.prefix_max_chunks,
                      session_header=a.session_header.lower()),
        max_in_flight=a.max_inflight_per_replica, max_queue=a.max_queue, queue_timeout=a.queue_timeout,
        probe_interval=a.probe_interval, connect_timeout=a.connect_timeout, read_timeout=a.read_timeout,
        log_level=a.log_level, otel_exporter=a.otel_exporter,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def _discovery(options: Options, pool: ReplicaPool) -> AsyncIterator[None]:
    if options.service is None:
        pool.set_endpoints(options.endpoints)
        yield
        return
    from paged_platform.kube import KubeTarget, connect

    async with connect(KubeTarget(options.kubeconfig, None, options.namespace)) as kube:
        task = asyncio.create_task(
            watch_endpoint_slices(kube.api, kube.namespace, options.service, options.port_name, pool.set_endpoints)
        )
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def create_app(options: Options, tracer: trace.Tracer | None = None) -> Starlette:
    """The router's app; its lifespan opens the upstream session, the pool and discovery, and closes them.
    Spans go to ``tracer`` if given (tests), else to the exporter the options name."""
    router = Router(RouterMetrics(), options.limits, tracer or configure_tracing(options.otel_exporter),
                    options.served_models)  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=None, connect=options.connect_timeout, sock_read=options.read_timeout)
        # No connection cap of the session's own: the pool's per-replica in-flight bound is the cap.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
            pool = ReplicaPool(
                make_policy(options.policy, options.params), router.metrics, session,
                max_in_flight=options.max_in_flight, queue_size=options.max_queue,
                queue_timeout=options.queue_timeout, probe_interval=options.probe_interval,
            )  # fmt: skip
            router.attach(pool, session)
            try:
                async with _discovery(options, pool):
                    await pool.wait_probed(timeout=5.0)
                    log.info("routing with policy %s on http://%s:%d", options.policy, options.host, options.port)
                    yield
            finally:
                await pool.close()

    return build_app(router, lifespan)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app = create_app(options)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level,
                            access_log=False, loop="auto", http="auto", lifespan="on")  # fmt: skip
    uvicorn.Server(config).run()
