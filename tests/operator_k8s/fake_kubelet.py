"""A fake kubelet for the engine container: kwok pods run nothing, so this starts a real ``paged-engine`` process at
each Running pod's IP and stops it when the pod goes away.

It does what a kubelet does with our container and no more: environment variables from ConfigMap and Secret
references resolved when the container starts, ``$(VAR)`` expanded in the arguments, the container's own
arguments run, and the pod's ``Ready`` condition kept to what the readiness probe (``/ready``) answers (kwok
marks pods ready once, at start, and runs no probe).

Two substitutions make a pod run on this machine: the model argument becomes a local tiny model, and ``--host``
becomes the pod's IP (each pod has its own loopback address, as it has its own network namespace in a cluster).
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from e2e.cluster.client import STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from tests.markers import require_mark

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def resolve_env(client: KubeClient, namespace: str, env: list[Mapping[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in env:
        if "value" in item:
            out[item["name"]] = item["value"]
            continue
        ref = item.get("valueFrom") or {}
        if "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            cm = client.get(f"/api/v1/namespaces/{namespace}/configmaps/{key['name']}")
            out[item["name"]] = cm["data"][key["key"]]
        elif "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            secret = client.get(f"/api/v1/namespaces/{namespace}/secrets/{key['name']}")
            out[item["name"]] = base64.b64decode(secret["data"][key["key"]]).decode()
        else:
            raise ValueError(f"env {item['name']}: unsupported source {sorted(ref)}")
    return out


def container_argv(container: Mapping[str, Any], env: Mapping[str, str], model: Path, host: str) -> list[str]:
    """The container's command line, expanded like the kubelet does, for a local model at the pod's IP."""
    args = [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a) for a in container["args"]]
    if args[0] != "serve" or "--host" not in args:
        raise ValueError(f"not an engine container: {args}")
    args[1] = str(model)
    args[args.index("--host") + 1] = host
    return [sys.executable, "-m", "paged_engine.cli", *args]


@dataclass
class Engine:
    pod: str
    ip: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class FakeKubelet:
    """Keeps one engine process per Running pod matching ``selector`` (polling; stop with ``close``)."""

    def __init__(self, client: KubeClient, namespace: str, selector: str, model: Path, log_dir: Path) -> None:
        require_mark("server", "runs real engine servers for its pods (a FakeKubelet)")
        self._client, self._namespace, self._selector = client, namespace, selector
        self._model, self._log_dir = model, log_dir
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.started: list[str] = []
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self._thread.start()

    def engines(self) -> list[Engine]:
        with self._lock:
            return [e for e in self._engines.values() if e.process.poll() is None]

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._sync()
            except (ApiError, OSError, ValueError, KeyError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _sync(self) -> None:
        pods = self._client.get(f"/api/v1/namespaces/{self._namespace}/pods", labelSelector=self._selector)["items"]
        running = {
            p["metadata"]["name"]: p
            for p in pods
            if p["status"].get("phase") == "Running"
            and p["status"].get("podIP")
            and not p["metadata"].get("deletionTimestamp")
        }
        with self._lock:
            gone = [name for name in self._engines if name not in running]
        for name in gone:
            with self._lock:
                engine = self._engines.pop(name)
            engine.stop()
        for name, pod in running.items():
            with self._lock:
                engine = self._engines.get(name)
            if engine is None:
                engine = self._start(pod)
                with self._lock:
                    self._engines[name] = engine
            self._probe(engine, pod)

    def _probe(self, engine: Engine, pod: Mapping[str, Any]) -> None:
        """The readiness probe: the pod's Ready condition follows the engine's /ready."""
        try:
            ready = httpx.get(f"{engine.url}/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            ready = False
        want = "True" if ready else "False"
        have = next((c["status"] for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), None)
        if have != want:
            self._client.patch(
                f"/api/v1/namespaces/{self._namespace}/pods/{engine.pod}/status",
                {"status": {"conditions": [{"type": "Ready", "status": want}]}},
                content_type=STRATEGIC_MERGE_PATCH,
            )

    def _start(self, pod: Mapping[str, Any]) -> Engine:
        (container,) = pod["spec"]["containers"]
        env = resolve_env(self._client, self._namespace, container.get("env", []))
        ip = pod["status"]["podIP"]
        argv = container_argv(container, env, self._model, ip)
        port = container["ports"][0]["containerPort"]
        log_path = self._log_dir / f"engine-{pod['metadata']['name']}.log"
        child_env = {**os.environ, **env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        with log_path.open("wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=child_env)
        self.started.append(pod["metadata"]["name"])
        return Engine(pod["metadata"]["name"], ip, port, process, log_path)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.stop()
