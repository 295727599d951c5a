"""The names the platform starts an engine with are the engine's own: every flag the contract lists is a flag of
``paged-engine serve`` (or ``download``), and the environment variables it lists set what they claim."""

from __future__ import annotations

import pytest
from paged_engine.cli import build_parser, engine_config, server_config
from paged_platform.engine_contract.launch import (
    ADMIN_TOKEN_ENV,
    API_KEY_ENV,
    DOWNLOAD,
    MAX_NUM_BATCHED_TOKENS_ENV,
    MAX_NUM_SEQS_ENV,
    OTEL_EXPORTER_ENV,
    SERVE,
    DownloadFlag,
    ServeFlag,
)


def _flags(command: str) -> set[str]:
    sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    return {option for action in sub._actions for option in action.option_strings}


def test_every_serve_flag_of_the_contract_is_a_flag_of_the_engine() -> None:
    assert set(ServeFlag) <= _flags(SERVE), set(ServeFlag) - _flags(SERVE)


def test_every_download_flag_of_the_contract_is_a_flag_of_the_engine() -> None:
    assert set(DownloadFlag) <= _flags(DOWNLOAD), set(DownloadFlag) - _flags(DOWNLOAD)


def test_the_contracts_environment_sets_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ((MAX_NUM_SEQS_ENV, "7"), (MAX_NUM_BATCHED_TOKENS_ENV, "70"), (ADMIN_TOKEN_ENV, "t" * 16),
                        (API_KEY_ENV, "key"), (OTEL_EXPORTER_ENV, "console")):  # fmt: skip
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args([SERVE])
    scheduler, server = engine_config(args).scheduler, server_config(args)
    assert (scheduler.max_num_seqs, scheduler.max_num_batched_tokens) == (7, 70)
    assert (server.admin_token, server.api_key, server.otel_exporter) == ("t" * 16, "key", "console")
