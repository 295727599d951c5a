"""``paged-operator run``: start the kopf operator with the paged handlers.

One replica with the Recreate strategy is the deployment model (see the chart): ``--standalone`` turns off
kopf's peering, which coordinates operators but does not elect a leader.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from pathlib import Path

import kopf

from paged_operator import admin_token, health
from paged_operator.handlers import Options, Shared


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
        "--pending-timeout",
        type=_positive,
        default=120.0,
        help="seconds a pod may stay unschedulable before it counts as missing capacity (InsufficientResources)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    kopf.configure(debug=args.log_level == "debug", quiet=args.log_level in ("warning", "error"))
    if args.log_level == "error":
        logging.getLogger().setLevel(logging.ERROR)
    if args.metrics_port is not None:
        health.serve_metrics(args.metrics_port, args.metrics_address)
    try:
        token_key = admin_token.load_key(args.token_key_file)
    except admin_token.TokenKeyError as exc:
        parser.error(str(exc))
    options = Options(
        scrape_timeout_s=args.scrape_timeout,
        watch_timeout_s=int(args.watch_timeout),
        request_timeout_s=args.request_timeout,
        pending_timeout_s=args.pending_timeout,
        token_key=token_key,
        clusterwide=args.all_namespaces,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            kopf.operator(
                standalone=args.standalone,
                clusterwide=args.all_namespaces,
                namespaces=args.namespace or (),
                liveness_endpoint=args.liveness,
                memo=kopf.Memo(shared=Shared(options=options)),
            )
        )


if __name__ == "__main__":
    main()
