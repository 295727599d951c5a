"""The API server process's settings: what ``paged-engine serve``'s server flags set, generated from the fields
here as the engine's are from ``EngineConfig`` (``config_fields``). The environment variables named here are the
engine contract's, which the operator sets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paged_platform.engine_contract.launch import ADMIN_TOKEN_ENV, API_KEY_ENV, OTEL_EXPORTER_ENV
from paged_platform.tracing_contract import EXPORTERS

from paged_engine.config_fields import positive_int, setting
from paged_engine.tools.parsers import TOOL_PARSER_CHOICES

#: What MODEL means when it is not given: Gemma 3 270M, served as this name.
DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "gemma-3-270m"
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class ServerConfig:
    headless: bool = setting(
        False, "run only this host's workers (--node-rank above 0 of --nnodes): no API server, no scheduler"
    )
    host: str = setting("127.0.0.1", "address to listen on (0.0.0.0 inside a pod)")
    port: int = setting(8000, "the port of the OpenAI-compatible API, /health, /ready and /metrics")
    admin_port: int | None = setting(None, "serve /admin on this port only, not on --port (keep it out of the Service)")
    served_model_name: str | None = setting(None, "model name clients use (default: from MODEL)")
    max_waiting_requests: int = setting(
        1024, "requests not yet started beyond which new ones get 503 + Retry-After", parse=positive_int
    )
    max_request_body_bytes: int = setting(
        32 << 20, "larger request bodies are refused with 413 before they are parsed", parse=positive_int
    )
    chat_template: str | None = setting(None, "a Jinja chat template file overriding the model's")
    tool_call_parser: str = setting(
        "auto", "how tool calls are read from chat output; auto: the chat template's family",
        choices=TOOL_PARSER_CHOICES,
    )  # fmt: skip
    api_key: str | None = setting(None, "require 'Authorization: Bearer KEY' on /v1", env=API_KEY_ENV)
    admin_token: str | None = setting(None, "require 'Authorization: Bearer TOKEN' on /admin", env=ADMIN_TOKEN_ENV)
    shutdown_grace_seconds: float = setting(
        30.0, "on SIGTERM, how long in-flight requests may finish before the server exits"
    )
    otel_exporter: str = setting("off", "OpenTelemetry trace exporter", env=OTEL_EXPORTER_ENV, choices=EXPORTERS)
    log_level: str = setting("info", "log level of both processes", choices=LOG_LEVELS)

    def model_name(self, model: str | None) -> str:
        """The model name clients use: ``--served-model-name``, else derived from MODEL."""
        if self.served_model_name:
            return self.served_model_name
        if model in (None, DEFAULT_MODEL):
            return DEFAULT_MODEL_NAME
        return Path(model).name.removesuffix(".gguf")

    @classmethod
    def fields(cls) -> list[tuple[type, dataclasses.Field[Any]]]:
        """Every server setting with its owner, in declaration order (the server's flags)."""
        return [(cls, f) for f in dataclasses.fields(cls)]
