"""``paged-operator run``: start the kopf operator with the paged handlers.

With ``--leader-election`` (the chart runs two replicas so) each replica is a candidate for a
``coordination.k8s.io`` Lease (``leader``); only the one holding it runs kopf, the other stands by, answering
its liveness probe, until the Lease is released (the leader stops: at once) or expires (it died: within
the lease duration). A leader that cannot renew stops acting and exits (status 1), to be restarted as a
candidate, as client-go's controllers do. ``--standalone`` turns off kopf's peering either way: it
coordinates operators but does not elect a leader.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import kopf
from aiohttp import web

from paged_operator import (
    admin_token,
    drift,
    handlers,  # noqa: F401  registers the kopf handlers that kopf.operator runs
    operator_metrics,
)
from paged_operator.clients import child_reads
from paged_operator.clients.kube import KubeApi
from paged_operator.leadership.leader import LeaderElector
from paged_operator.leadership.lease import LeaseSpec
from paged_operator.policy.admission import AdmissionPolicy
from paged_operator.render.settings import Images, RenderSettings, from_flags, parse_label
from paged_operator.shared import Options, Shared

log = logging.getLogger(__name__)


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0..65535")
    return port


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {number:g}")
    return number


def _http_url(value: str) -> str:
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {value!r}")
    return value


def _label(value: str) -> str:
    try:
        parse_label(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _add_render_flags(run: argparse.ArgumentParser) -> None:
    """What the operator renders that no ModelDeployment says: its default images, who its NetworkPolicies admit."""
    defaults = Images()
    run.add_argument(
        "--engine-image", default=defaults.engine, metavar="IMAGE",
        help="the engine image of a ModelDeployment that names none (spec.engine.image); resolved at every render, so "
        "a new value rolls those engines",
    )  # fmt: skip
    run.add_argument(
        "--router-image", default=defaults.router, metavar="IMAGE",
        help="the router image of a ModelDeployment that names none (spec.router.image), likewise",
    )  # fmt: skip
    run.add_argument(
        "--operator-pod-label", action="append", default=[], type=_label, metavar="KEY=VALUE",
        help="a label of the operator's own pods (in $POD_NAMESPACE), which spec.networkPolicy admits to the engines' "
        "API and admin ports; none: every pod of that namespace; repeatable",
    )  # fmt: skip
    run.add_argument(
        "--prometheus-namespace-label", action="append", default=[], type=_label, metavar="KEY=VALUE",
        help="a label of the namespaces Prometheus runs in, for spec.networkPolicy (none: any namespace); repeatable",
    )  # fmt: skip
    run.add_argument(
        "--prometheus-pod-label", action="append", default=[], type=_label, metavar="KEY=VALUE",
        help="a label of the Prometheus pods spec.networkPolicy admits to the engines' API port; without any "
        "--prometheus-*-label, none is admitted; repeatable",
    )  # fmt: skip


def render_settings(args: argparse.Namespace, namespace: str | None) -> RenderSettings:
    """The rendering flags as settings; ``namespace``: the operator's own ($POD_NAMESPACE; None outside a pod)."""
    return from_flags(
        engine_image=args.engine_image,
        router_image=args.router_image,
        namespace=namespace,
        pod_labels=args.operator_pod_label,
        prometheus_namespace_labels=args.prometheus_namespace_label,
        prometheus_pod_labels=args.prometheus_pod_label,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paged-operator", description="The paged Kubernetes operator.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="watch ModelDeployments and reconcile them", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    scope = run.add_mutually_exclusive_group(required=True)
    scope.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    run.add_argument("--standalone", action="store_true", help="no kopf peering (one operator replica)")
    run.add_argument("--liveness", default=None, help="liveness endpoint URL, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument("--metrics-port", type=_port, default=None, help="serve the operator's /metrics on this port")
    run.add_argument("--metrics-address", default="0.0.0.0", help="address for /metrics")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.add_argument("--scrape-timeout", type=_positive, default=2.0, help="seconds per engine /ready, /metrics call")
    run.add_argument("--watch-timeout", type=_positive, default=300.0, help="seconds before a watch is renewed")
    run.add_argument("--request-timeout", type=_positive, default=30.0, help="seconds per API-server request")
    run.add_argument(
        "--token-key-file",
        type=Path,
        required=True,
        help="file with the key (>= 32 bytes) the engines' admin tokens are derived from; the chart mounts its Secret",
    )
    run.add_argument(
        "--token-key-secret", default=None, metavar="NAME",
        help="while --token-key-file is not there yet: create this Secret (in $POD_NAMESPACE) with a new key and use"
        " it; the chart mounts the same Secret at --token-key-file",
    )  # fmt: skip
    run.add_argument(
        "--allowed-service-account", action="append", default=[], metavar="NAME",
        help="a ServiceAccount engine pods may run as (spec.pod.serviceAccountName) besides default; repeatable",
    )  # fmt: skip
    run.add_argument(
        "--allowed-volume-type", action="append", default=[], metavar="TYPE",
        help="a volume type spec.pod.volumes may use besides Pod Security's restricted ones (e.g. nfs); repeatable",
    )  # fmt: skip
    run.add_argument(
        "--allowed-image", action="append", default=[], metavar="PATTERN",
        help="images (glob, e.g. 'registry.example.com/*') a spec may name besides the operator's own (--engine-image, "
        "--router-image, this release's); repeatable",
    )  # fmt: skip
    _add_render_flags(run)
    run.add_argument(
        "--pending-timeout",
        type=_positive,
        default=120.0,
        help="seconds a pod may stay unschedulable before it counts as missing capacity (InsufficientResources)",
    )
    run.add_argument(
        "--prometheus-url",
        type=_http_url,
        default=None,
        help="read the engines' metrics from this Prometheus server's query API (/api/v1/query) instead of scraping "
        "each pod's /metrics; its engine series must carry the namespace and pod labels a PodMonitor attaches",
    )
    run.add_argument(
        "--prometheus-timeout", type=_positive, default=5.0, help="seconds for one round of Prometheus queries"
    )
    run.add_argument(
        "--no-child-watches",
        action="store_true",
        help="read engine Deployments, ConfigMaps and pods with GET/LIST each decision instead of watching them",
    )
    election = run.add_argument_group("leader election")
    election.add_argument("--leader-election", action="store_true", help="act only while holding the Lease")
    election.add_argument("--lease-name", default="paged-operator", help="the Lease's name")
    election.add_argument("--lease-namespace", default=None, help="the Lease's namespace (default: $POD_NAMESPACE)")
    election.add_argument("--lease-duration", type=_positive, default=15.0, help="seconds before a standby takes over")
    election.add_argument("--renew-deadline", type=_positive, default=10.0, help="seconds a leader may fail to renew")
    election.add_argument("--retry-period", type=_positive, default=2.0, help="seconds between Lease attempts")
    return parser


@dataclass(frozen=True)
class Election:
    namespace: str
    name: str
    identity: str
    spec: LeaseSpec


def _election(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Election | None:
    if not args.leader_election:
        return None
    namespace = args.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        parser.error("--leader-election needs --lease-namespace (or $POD_NAMESPACE, which the chart sets)")
    try:
        spec = LeaseSpec(args.lease_duration, args.renew_deadline, args.retry_period)
    except ValueError as exc:
        parser.error(str(exc))
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    return Election(namespace, args.lease_name, identity, spec)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    kopf.configure(debug=args.log_level == "debug", quiet=args.log_level in ("warning", "error"))
    if args.log_level == "error":
        logging.getLogger().setLevel(logging.ERROR)
    if args.metrics_port is not None:
        operator_metrics.serve_metrics(args.metrics_port, args.metrics_address)
    token_key = None  # generated once the operator runs (leads), unless mounted already
    if args.token_key_secret is None or args.token_key_file.is_file():
        try:
            token_key = admin_token.load_key(args.token_key_file)
        except admin_token.TokenKeyError as exc:
            parser.error(str(exc))
    key_namespace = os.environ.get("POD_NAMESPACE") or args.lease_namespace
    if token_key is None and not key_namespace:
        parser.error("--token-key-secret needs $POD_NAMESPACE (the chart sets it) or --lease-namespace")
    options = Options(
        scrape_timeout_s=args.scrape_timeout,
        watch_timeout_s=int(args.watch_timeout),
        request_timeout_s=args.request_timeout,
        pending_timeout_s=args.pending_timeout,
        token_key=token_key,
        clusterwide=args.all_namespaces,
        prometheus_url=args.prometheus_url,
        prometheus_timeout_s=args.prometheus_timeout,
        admission=AdmissionPolicy(
            service_accounts=frozenset(args.allowed_service_account),
            volume_types=frozenset(args.allowed_volume_type),
            images=tuple(args.allowed_image),
        ),
        render=render_settings(args, os.environ.get("POD_NAMESPACE")),
    )
    election = _election(args, parser)
    shared = Shared(options=options)
    if not args.no_child_watches:
        child_reads.register()
    drift.register()  # always: repairs need no objects held in memory, only the watch events

    async def operator(stop_flag: asyncio.Event | None = None) -> None:
        if shared.options.token_key is None:  # only the leader gets here: one replica creates the key
            shared.options.token_key = await _generated_token_key(
                args.token_key_file, args.token_key_secret, key_namespace or "", args.request_timeout
            )
        await kopf.operator(
            standalone=args.standalone,
            clusterwide=args.all_namespaces,
            namespaces=args.namespace or (),
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(shared=shared),
            stop_flag=stop_flag,
        )

    code = 0
    with contextlib.suppress(KeyboardInterrupt):
        if election is None:
            asyncio.run(operator())
        else:
            code = asyncio.run(_lead(election, shared, operator, args.liveness, args.request_timeout))
    sys.exit(code)


def _login() -> kopf.ConnectionInfo:
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings()) or kopf.login_with_service_account(
        settings=kopf.OperatorSettings()
    )
    if info is None:
        raise SystemExit("no kubeconfig and no in-cluster service account to log in with")
    return info


async def _generated_token_key(path: Path, secret: str, namespace: str, request_timeout_s: float) -> bytes:
    """The admin tokens' key: mounted at ``path``, or a new one stored as the Secret ``secret`` (create only)."""
    kube = KubeApi.from_connection(_login(), timeout_s=request_timeout_s)
    try:

        async def create(key: bytes) -> bool:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": namespace,
                             "labels": {"app.kubernetes.io/managed-by": "paged-operator"}},
                "type": "Opaque",
                "data": admin_token.secret_data(key),
            }  # fmt: skip
            created = await kube.create_if_absent(body)
            log.info("token key Secret %s/%s %s", namespace, secret, "created" if created else "exists: waiting")
            return created

        return await admin_token.obtain_key(path, create)
    except admin_token.TokenKeyError as exc:
        raise SystemExit(str(exc)) from None
    finally:
        await kube.aclose()


async def _lead(
    election: Election,
    shared: Shared,
    operator: Callable[[asyncio.Event], Awaitable[None]],
    liveness: str | None,
    request_timeout_s: float,
) -> int:
    """Stand by until the Lease is ours, then run the operator until it stops (0) or the Lease is lost (1)."""
    kube = KubeApi.from_connection(_login(), timeout_s=request_timeout_s)
    elector = LeaderElector(kube, election.namespace, election.name, election.identity, election.spec)
    operator_metrics.LEADER.set(0)
    try:
        standby = await serve_liveness(liveness) if liveness else None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("standing by for the lease %s/%s as %s", election.namespace, election.name, election.identity)
        if not await _first(elector.acquire(), stop.wait()):
            return 0  # asked to stop while standing by
        if standby is not None:
            await standby.cleanup()  # kopf's own liveness endpoint takes the port over
        shared.leading = elector.leading
        stop_flag = asyncio.Event()
        running = asyncio.create_task(operator(stop_flag))  # kopf handles SIGTERM / SIGINT from here on
        lost = await _first(elector.keep(), running)
        stop_flag.set()
        await running
        if lost:
            return 1
        await elector.release()
        return 0
    finally:
        await kube.aclose()


async def _first(first: Awaitable[None], other: Awaitable[None]) -> bool:
    """Run both until one ends; True if it was ``first``. The other is cancelled, unless it is a Task."""
    one = asyncio.ensure_future(first)
    two = asyncio.ensure_future(other)
    done, _ = await asyncio.wait({one, two}, return_when=asyncio.FIRST_COMPLETED)
    one.cancel()
    if not isinstance(other, asyncio.Task):
        two.cancel()
    return one in done


async def serve_liveness(url: str) -> web.AppRunner:
    """A standby's liveness endpoint (``/healthz`` at ``url``'s port): it answers while the process runs."""
    parsed = urllib.parse.urlsplit(url)
    app = web.Application()
    app.router.add_get(parsed.path or "/", lambda _: web.json_response({"standby": True}))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, parsed.hostname, parsed.port or 80).start()
    return runner


if __name__ == "__main__":
    main()
