"""Why an engine does not serve, named on the real node: the kubelet runs the engine image, restarts it, and writes
the container statuses the operator reads (``paged_operator.status.engine_failures``).

* An engine given a flag it does not know exits at once (argparse's code 2); the kubelet restarts it into
  ``CrashLoopBackOff``, and the ModelDeployment reads ``Ready=False`` / ``EngineCrashLooping`` with the exit code and
  the engine's own error line (the termination message: ``FallbackToLogsOnError``).
* An engine whose model load hangs is restarted by the kubelet's start-up probe (``/ready`` within
  ``spec.engine.startupTimeoutSeconds``), and reads as ``ModelLoadTimeout``. The hang is real: the engine-core
  process, which loads the model while the API process answers ``/ready`` with "loading", is stopped (SIGSTOP) as
  it starts, as a load stuck on storage that stops answering would be. Once the hang ends, the engine serves.

Each test applies its own ModelDeployment next to the module's (held at zero replicas), and deletes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from paged_platform.ctl import app
from typer.testing import CliRunner

from e2e.cluster.client import has_condition, wait_for
from e2e.cluster.node import pod_cgroup_dirs
from tests.node.conftest import Deployed, model_deployment_manifest

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.slow, pytest.mark.gemma]

# The fixture's own ModelDeployment runs no engine: each test brings the one it breaks.
MODEL_DEPLOYMENT_OVERRIDES = {"replicas": {"min": 0, "max": 1}}
BAD_FLAG = "--no-such-flag"
# The CRD's shortest start-up budget: the kubelet's start-up probe gives up after 6 failures 5 s apart.
STARTUP_BUDGET_S = 30
# The operator decides (and writes the status) this often: the API's shortest interval.
INTERVAL_S = 5


def _md_path(ns: str, name: str) -> str:
    return f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments/{name}"


def _condition(md: dict, kind: str) -> dict | None:
    return next((c for c in (md.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _engine_status(pod: dict) -> dict | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == "engine"), None)


@contextlib.contextmanager
def applied(deployed: Deployed, name: str, engine: dict) -> Iterator[str]:
    """A ModelDeployment ``name`` as the module's, with ``engine`` merged into ``spec.engine``, applied with kubectl
    and deleted afterwards."""
    ns = deployed.namespace
    manifest = model_deployment_manifest(ns, "model", {"replicas": {"min": 1, "max": 1}})
    manifest["metadata"]["name"] = name
    manifest["spec"]["engine"].update(engine)
    manifest["spec"]["autoscaling"]["intervalSeconds"] = INTERVAL_S
    file = deployed.manifest.with_name(f"{name}.yaml")
    file.write_text(yaml.safe_dump(manifest, sort_keys=False))
    deployed.kubectl("apply", "-f", str(file))
    try:
        yield name
    finally:
        deployed.kubectl("-n", ns, "delete", "modeldeployment", name, "--wait=true", "--timeout=120s", timeout=150)


def engine_pods(deployed: Deployed, name: str) -> list[dict]:
    pods = deployed.admin.get(
        f"/api/v1/namespaces/{deployed.namespace}/pods", labelSelector=f"app.kubernetes.io/instance={name}"
    )["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def wait_ready_reason(deployed: Deployed, name: str, reason: str, timeout_s: float) -> dict:
    """The ModelDeployment's ``Ready`` condition once it is False with ``reason``."""

    def named() -> dict | None:
        deployed.node.ensure_running()
        cond = _condition(deployed.admin.get(_md_path(deployed.namespace, name)), "Ready")
        return cond if cond and cond["status"] == "False" and cond["reason"] == reason else None

    try:
        return wait_for(f"{name}: Ready=False {reason}", named, timeout_s=timeout_s, interval_s=1)
    except TimeoutError as exc:
        statuses = yaml.safe_dump([_engine_status(p) for p in engine_pods(deployed, name)])
        raise TimeoutError(f"{exc}\nengine container statuses:\n{statuses}\n{deployed.describe()}") from None


def warning_events(deployed: Deployed, name: str, reason: str) -> list[dict]:
    events = deployed.admin.get(
        f"/api/v1/namespaces/{deployed.namespace}/events", fieldSelector=f"involvedObject.name={name}"
    )["items"]
    return [e for e in events if e["reason"] == reason and e["involvedObject"]["kind"] == "ModelDeployment"]


def describe_ready_row(deployed: Deployed, name: str) -> str:
    """``paged-ctl describe NAME``'s row of the Ready condition, as a user reads it."""
    argv = ["describe", name, "--kubeconfig", str(deployed.kubectl.kubeconfig), "-n", deployed.namespace]
    out = CliRunner().invoke(app, argv, env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    rows = [line for line in out.output.splitlines() if line.split()[:2] == ["Ready", "False"]]
    assert rows, out.output
    return rows[0]


def test_an_engine_with_a_bad_flag_reads_as_crash_looping_with_its_error(deployed: Deployed):
    with applied(deployed, "crashy", {"extraArgs": ["--attention-backend", "cpu", BAD_FLAG]}) as name:
        cond = wait_ready_reason(deployed, name, "EngineCrashLooping", timeout_s=150)

        (pod,) = engine_pods(deployed, name)
        status = _engine_status(pod)
        assert status is not None and status["restartCount"] >= 1, status
        last = status["lastState"]["terminated"]
        assert last["exitCode"] == 2, last  # argparse's usage error, from the real image's paged-engine
        assert f"unrecognized arguments: {BAD_FLAG}" in last["message"], last  # the kubelet's termination message

        message = cond["message"]
        assert f"pod {pod['metadata']['name']}" in message
        assert "the engine exited with code 2" in message
        assert f"unrecognized arguments: {BAD_FLAG}" in message, message
        events = warning_events(deployed, name, "EngineCrashLooping")
        assert events and all(e["type"] == "Warning" for e in events), events
        assert f"unrecognized arguments: {BAD_FLAG}" in events[0]["message"]
        assert "EngineCrashLooping" in describe_ready_row(deployed, name)


class LoadHang:
    """Stops (SIGSTOP) every engine-core process of a ModelDeployment's engine containers as it starts, until
    released; then resumes the ones still stopped. The engine's API process keeps running and answering."""

    def __init__(self, deployed: Deployed, name: str) -> None:
        self.deployed, self.name = deployed, name
        self.stopped: dict[int, str] = {}  # pid -> container ID
        self.errors: list[str] = []
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _containers(self) -> list[str]:
        ids = []
        for pod in engine_pods(self.deployed, self.name):
            status = _engine_status(pod) or {}
            if "running" in (status.get("state") or {}) and status.get("containerID"):
                ids.append(status["containerID"].split("://", 1)[1])
        return ids

    def _stop_cores(self, container: str) -> None:
        for base in pod_cgroup_dirs():
            procs = base / container / "cgroup.procs"
            if procs.is_file():
                break
        else:
            return
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except FileNotFoundError:  # the container just ended
            return
        for pid in pids:
            if pid in self.stopped:
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if b"spawn_main" in cmdline:  # the engine core, started by multiprocessing's spawn (not its tracker)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped[pid] = container

    def _run(self) -> None:
        while not self._release.is_set():
            try:
                for container in self._containers():
                    self._stop_cores(container)
            except Exception as exc:  # reported by the test, which fails on it
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._release.wait(0.2)

    def __enter__(self) -> LoadHang:
        self._thread.start()
        return self

    def release(self) -> None:
        self._release.set()
        self._thread.join(timeout=30)
        for pid in self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_hung_model_load_is_restarted_and_reads_as_model_load_timeout(deployed: Deployed):
    engine = {"startupTimeoutSeconds": STARTUP_BUDGET_S}
    with applied(deployed, "hung", engine) as name, LoadHang(deployed, name) as hang:
        ns = deployed.namespace
        cond = wait_ready_reason(deployed, name, "ModelLoadTimeout", timeout_s=STARTUP_BUDGET_S + 120)
        assert not hang.errors, hang.errors
        assert hang.stopped, "the engine core was stopped while it loaded"

        (pod,) = engine_pods(deployed, name)
        pod_name = pod["metadata"]["name"]
        status = _engine_status(pod)
        assert status is not None and status["restartCount"] >= 1 and not status["ready"], status
        kubelet_events = deployed.admin.get(
            f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={pod_name}"
        )["items"]
        killed = [e["message"] for e in kubelet_events if e["reason"] == "Killing"]
        assert any("failed startup probe, will be restarted" in m for m in killed), killed

        message = cond["message"]
        assert f"pod {pod_name}" in message
        assert f"did not serve within its start-up budget of {STARTUP_BUDGET_S} s" in message, message
        assert "spec.engine.startupTimeoutSeconds" in message
        events = warning_events(deployed, name, "ModelLoadTimeout")
        assert events and all(e["type"] == "Warning" for e in events), events
        assert f"start-up budget of {STARTUP_BUDGET_S} s" in events[0]["message"]
        assert "ModelLoadTimeout" in describe_ready_row(deployed, name)

        # The hang ends: the stopped load resumes (or the kubelet's next restart loads afresh) and the engine serves.
        hang.release()

        def serving() -> dict | None:
            deployed.node.ensure_running()
            md = deployed.admin.get(_md_path(ns, name))
            pods = engine_pods(deployed, name)
            return md if has_condition(md, "Ready") and len(pods) == 1 and has_condition(pods[0], "Ready") else None

        try:
            wait_for(f"{name} to serve once its load no longer hangs", serving, timeout_s=150, interval_s=1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{deployed.describe()}") from None
