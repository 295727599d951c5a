"""The kubelet's part for kwok pods that need something behind their IP: a process per Running pod.

kwok pods run nothing; ``PodProcesses`` starts the commands a test gives for each Running pod that matches a
selector (at the pod's own loopback IP), stops them when the pod goes, and keeps the pod's ``Ready`` condition
to whether they run. It polls the API server and rides out its outages (a test may restart it): a failed poll
is retried at the next one, and the processes it started keep running meanwhile, as containers do while their
node's kubelet cannot reach the API server.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from e2e.cluster.client import STRATEGIC_MERGE_PATCH, ApiError, KubeClient

log = logging.getLogger(__name__)
Commands = Callable[[str, str], list[list[str]]]
"""(pod name, pod IP) -> the command lines to run for that pod."""


class PodProcesses:
    """Runs ``commands(name, ip)`` for each Running pod in ``ns`` that matches ``selector``."""

    def __init__(self, client: KubeClient, ns: str, selector: str, commands: Commands, log_dir: Path) -> None:
        self.client, self.ns, self.selector, self.commands, self.log_dir = client, ns, selector, commands, log_dir
        self.running: dict[str, tuple[str, list[subprocess.Popen[bytes]]]] = {}
        self.failed_polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def ips(self) -> list[str]:
        return [ip for ip, _ in list(self.running.values())]

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self._poll()
            except (ApiError, httpx.HTTPError) as exc:
                self.failed_polls += 1
                log.info("pod poll failed (retrying): %s", exc)

    def _poll(self) -> None:
        pods = self.client.get(f"/api/v1/namespaces/{self.ns}/pods", labelSelector=self.selector)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        live = {p["metadata"]["name"]: p["status"].get("podIP") for p in running
                if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
        for name, ip in live.items():
            if ip and name not in self.running:
                env = {**os.environ, "PYTHONUNBUFFERED": "1"}
                procs = []
                for i, command in enumerate(self.commands(name, ip)):
                    with (self.log_dir / f"{name}-{i}.log").open("wb") as out:
                        procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))
                self.running[name] = (ip, procs)
        for name in [n for n in self.running if n not in live]:
            for proc in self.running.pop(name)[1]:
                proc.terminate()
        for pod in running:
            self._probe(pod)

    def _probe(self, pod: dict[str, Any]) -> None:
        """The kubelet's part kwok leaves out: Ready follows whether the process runs (kwok sets it once, at
        start)."""
        name = pod["metadata"]["name"]
        if name not in self.running:
            return
        alive = all(proc.poll() is None for proc in self.running[name][1])
        want = "True" if alive else "False"
        have = next((c["status"] for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), None)
        if have != want:
            self.client.patch(
                f"/api/v1/namespaces/{self.ns}/pods/{name}/status",
                {"status": {"conditions": [{"type": "Ready", "status": want}]}},
                content_type=STRATEGIC_MERGE_PATCH,
            )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(35)  # a poll in flight may wait for its request's timeout
        for _, procs in self.running.values():
            for proc in procs:
                proc.terminate()
                proc.wait(10)
