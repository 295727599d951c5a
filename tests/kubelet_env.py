"""What the kubelet makes of a container's ``env`` list, and what ``paged-engine`` makes of a rendered container, for
tests that check or run what the operator renders."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from paged_engine.cli import build_parser, engine_config, server_config
from paged_engine.engine.config import EngineConfig
from paged_engine.server.config import ServerConfig

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_environment(
    env: Sequence[Mapping[str, Any]],
    fields: Mapping[str, str],
    config_maps: Mapping[str, Mapping[str, str]] | None = None,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str]:
    """The variables a container starts with: ``value`` with ``$(VAR)`` expanded from the variables defined before
    it (an unknown reference stays as written, as the kubelet leaves it), ``valueFrom.fieldRef`` from ``fields``
    (the downward API: ``{"metadata.name": "pod-0"}``), and ``configMapKeyRef`` / ``secretKeyRef`` from the
    objects' data given by name (an entry whose object is not given is left out). A later entry of the same name
    wins."""
    out: dict[str, str] = {}
    sources = {"configMapKeyRef": config_maps or {}, "secretKeyRef": secrets or {}}
    for entry in env:
        source = entry.get("valueFrom", {})
        if "value" in entry:
            out[entry["name"]] = _REFERENCE.sub(lambda m: out.get(m.group(1), m.group(0)), entry["value"])
        elif (ref := source.get("fieldRef")) is not None:
            out[entry["name"]] = fields[ref["fieldPath"]]
        for kind, objects in sources.items():
            if (ref := source.get(kind)) is not None and ref["name"] in objects:
                out[entry["name"]] = objects[ref["name"]][ref["key"]]
    return out


def engine_started_by(
    container: Mapping[str, Any], environment: Mapping[str, str]
) -> tuple[argparse.Namespace, EngineConfig, ServerConfig]:
    """What ``paged-engine`` makes of a rendered container: its arguments parsed by the engine's own parser with
    ``environment`` set (the engine reads its budgets, admin token and API key from there)."""
    saved = dict(os.environ)
    os.environ.update(environment)
    try:
        args = build_parser().parse_args(container["args"])
        return args, engine_config(args), server_config(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
