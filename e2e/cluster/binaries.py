"""Locate the test bed's binaries, building them first (``build.sh``) when the pinned versions are not cached."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypeVar

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
COMPONENTS = ("kubernetes", "etcd", "kwok", "helm", "promtool")
#: The real node's binaries: built only for sessions that start the node.
NODE_COMPONENTS = ("kubernetes-node", "coredns", "pause")


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kwok_stages: Path
    helm: Path
    promtool: Path


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_proxy: Path
    kubectl: Path
    coredns: Path
    pause: Path


def parse_build_output(text: str) -> dict[str, Path]:
    """``name=path`` lines from build.sh, as a mapping; anything else on stdout is a bug in the script."""
    paths: dict[str, Path] = {}
    for line in text.splitlines():
        name, sep, path = line.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"unexpected line from {BUILD_SCRIPT.name}: {line!r} (expected name=path)")
        paths[name] = Path(path)
    return paths


def ensure_binaries(progress: TextIO | None = None) -> Binaries:
    """Build whatever is missing (a no-op when all pinned binaries are cached) and return their paths. Build progress
    goes to ``progress`` (default stderr): a cold build takes tens of minutes on two cores."""
    return _build(Binaries, COMPONENTS, progress)


def ensure_node_binaries(progress: TextIO | None = None) -> NodeBinaries:
    """The real node's binaries, built like ``ensure_binaries`` (a few minutes cold with a warm module cache)."""
    return _build(NodeBinaries, NODE_COMPONENTS, progress)


B = TypeVar("B", Binaries, NodeBinaries)


def _build(kind: type[B], components: tuple[str, ...], progress: TextIO | None) -> B:
    stream = progress if progress is not None else sys.stderr
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT), *components],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    tail: deque[str] = deque(maxlen=40)
    for line in proc.stderr:  # stream progress while building; stdout is small and read afterwards
        stream.write(line)
        stream.flush()
        tail.append(line)
    out = proc.stdout.read()
    if proc.wait() != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode}:\n{''.join(tail)}")
    paths = parse_build_output(out)
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"{BUILD_SCRIPT} reported binaries that do not exist: {', '.join(missing)}")
    try:
        return kind(**{name.replace("-", "_"): path for name, path in paths.items()})
    except TypeError as exc:
        raise RuntimeError(f"{BUILD_SCRIPT} reported {sorted(paths)}, not the expected binaries: {exc}") from exc
