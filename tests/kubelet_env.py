"""What the kubelet makes of a container's ``env`` list, for tests that run a rendered container as a process."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_environment(env: Sequence[Mapping[str, Any]], fields: Mapping[str, str]) -> dict[str, str]:
    """The variables a container starts with: ``value`` with ``$(VAR)`` expanded from the variables defined before
    it (an unknown reference stays as written, as the kubelet leaves it), and ``valueFrom.fieldRef`` from
    ``fields`` (the downward API: ``{"metadata.name": "pod-0"}``). Entries from a Secret or ConfigMap are left
    out (there is none here). A later entry of the same name wins."""
    out: dict[str, str] = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = _REFERENCE.sub(lambda m: out.get(m.group(1), m.group(0)), entry["value"])
        elif (ref := entry.get("valueFrom", {}).get("fieldRef")) is not None:
            out[entry["name"]] = fields[ref["fieldPath"]]
    return out
