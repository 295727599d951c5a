"""Fixtures for the operator against the real control plane: the CRD, and ``paged-operator`` processes that act as
the chart's ServiceAccount (its RBAC rendered by helm), so a permission the chart lacks fails these tests."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from paged_platform.api import CRD_NAME
from paged_platform.crd import crd

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import APPLY_PATCH, KubeClient, wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "paged"
CHART_SERVICE_ACCOUNT = "test-paged"  # "<release>-paged" for release "test"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def md_crd(kube_admin: KubeClient) -> str:
    """The generated CRD, server-side applied (an identical copy applied by another test is no conflict)."""
    return apply_crd(kube_admin)


def apply_crd(kube_admin: KubeClient) -> str:
    """Server-side apply the generated CRD and wait until ModelDeployments are served; returns its name."""
    kube_admin.request(
        "PATCH",
        f"{CRDS}/{CRD_NAME}",
        crd(),
        params={"fieldManager": "paged-operator-tests", "force": "true"},
        content_type=APPLY_PATCH,
    )

    def established() -> bool:
        conditions = (kube_admin.get(f"{CRDS}/{CRD_NAME}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(f"CRD {CRD_NAME} established", established, timeout_s=30)
    wait_for("modeldeployments served", lambda: kube_admin.get("/apis/paged.dev/v1alpha1/modeldeployments"))
    return CRD_NAME


@dataclass
class OperatorProcess:
    """One ``paged-operator run`` process watching one namespace as a given identity."""

    kubeconfig: Path
    namespace: str
    log_dir: Path
    extra_args: tuple[str, ...] = ()
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Let the operator create its token key as this Secret (as the chart has it) instead of giving it a key file.
    token_key_secret: str | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    @property
    def token_key_file(self) -> Path:
        """The admin tokens' key (the chart mounts a Secret); kept across restarts, as the chart's is."""
        path = self.log_dir / "token-key"
        if not path.exists() and self.token_key_secret is None:
            path.write_text(secrets.token_urlsafe(48))
        return path

    def start(self) -> OperatorProcess:
        self.starts += 1
        command = [
            sys.executable, "-m", "paged_operator.cli", "run", "--standalone", "--namespace", self.namespace,
            "--liveness", f"http://127.0.0.1:{self.health_port}/healthz",
            "--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1",
            "--watch-timeout", "20", "--scrape-timeout", "1", "--log-level", "info",
            "--token-key-file", str(self.token_key_file), *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        if self.token_key_secret is not None:
            command += ["--token-key-secret", self.token_key_secret]
            env["POD_NAMESPACE"] = self.namespace
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for("operator liveness endpoint", self._alive, timeout_s=60)
        return self

    def _alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"operator exited with {self.process.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def ensure_alive(self) -> None:
        if not self._alive():
            raise AssertionError(f"operator liveness endpoint does not answer:\n{self.log()}")

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-6000:] for p in sorted(self.log_dir.glob("operator-*.log")))

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def chart_access(
    md_crd: str, kube_chart_access: Callable[..., ServiceAccountAccess], kube_namespace: str
) -> ServiceAccountAccess:
    """The operator's identity as the chart installs it, watching the test's namespace."""
    return kube_chart_access(CHART, CHART_SERVICE_ACCOUNT, set_values={"watchNamespace": kube_namespace})


@pytest.fixture
def operator(chart_access: ServiceAccountAccess, kube_namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(chart_access.kubeconfig, kube_namespace, tmp_path).start()
    yield proc
    proc.stop()
