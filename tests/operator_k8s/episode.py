"""Render a ModelDeployment's recorded decisions as the Markdown of ``docs/operator-episode.md``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _state(state: dict[str, Any]) -> str:
    names = {"replicas": "replicas", "maxNumSeqs": "maxNumSeqs", "maxNumBatchedTokens": "maxNumBatchedTokens"}
    return ", ".join(f"{names[k]}={v}" for k, v in state.items() if k in names) or "-"


def render_episode(obj: dict[str, Any], *, load_stopped: float) -> str:
    status = obj.get("status") or {}
    decisions = status.get("decisions", [])
    start = datetime.fromisoformat(decisions[0]["time"]).timestamp() if decisions else load_stopped
    lines = [
        "| t (s) | kind | from | to | reason | signals |",
        "|---:|---|---|---|---|---|",
    ]
    for d in decisions:
        t = datetime.fromisoformat(d["time"]).timestamp() - start
        signals = ", ".join(f"{k}={v:g}" for k, v in sorted(d.get("signals", {}).items()))
        reason = d["reason"].replace("|", "\\|")
        lines.append(f"| {t:.0f} | {d['kind']} | {_state(d['from'])} | {_state(d['to'])} | {reason} | {signals} |")
    conditions = [
        f"- `{c['type']}` = {c['status']} ({c['reason']}): {c['message']}" for c in status.get("conditions", [])
    ]
    stamp = datetime.fromtimestamp(load_stopped, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "\n".join(
        [
            f"Load stopped at t = {load_stopped - start:.0f} s ({stamp}).",
            "",
            *lines,
            "",
            "Conditions at the end:",
            "",
            *conditions,
            "",
        ]
    )


def write_episode(path: Path, obj: dict[str, Any], *, load_stopped: float) -> None:
    path.write_text(render_episode(obj, load_stopped=load_stopped))
