"""Fast tests of the test bed's pure parts and process handling; these need no Kubernetes binaries."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from e2e.cluster import controlplane
from e2e.cluster.access import object_path
from e2e.cluster.binaries import BUILD_SCRIPT, Binaries, parse_build_output
from e2e.cluster.client import has_condition, wait_for
from e2e.cluster.controlplane import ControlPlane, ControlPlaneConfig, _node, free_port
from e2e.cluster.kubeconfig import Credentials
from e2e.cluster.processes import ProcessError, ProcessGroup
from e2e.cluster.pytest_plugin import _namespace_name


def test_parse_build_output_maps_names_to_paths() -> None:
    assert parse_build_output("etcd=/c/etcd-v3/etcd\nkwok-stages=/c/k/stages.yaml\n") == {
        "etcd": Path("/c/etcd-v3/etcd"),
        "kwok-stages": Path("/c/k/stages.yaml"),
    }
    with pytest.raises(ValueError, match="expected name=path"):
        parse_build_output("go: downloading something\n")


def test_namespace_names_are_valid_dns_labels() -> None:
    name = _namespace_name("test_Deployment[param-1 with SPACES]" + "x" * 80)
    assert len(name) <= 63 and name == name.lower()
    assert name.replace("-", "").isalnum() and not name.startswith("-")
    assert _namespace_name("___").startswith("t-")
    assert _namespace_name("a") != _namespace_name("a")


def test_object_path_for_namespaced_and_cluster_kinds() -> None:
    role = {"kind": "Role", "metadata": {"name": "r"}}
    assert object_path(role, "ns") == (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/r",
    )
    sa = {"kind": "ServiceAccount", "metadata": {"name": "s", "namespace": "own"}}
    assert object_path(sa, "ns")[1] == "/api/v1/namespaces/own/serviceaccounts/s"
    assert object_path({"kind": "ClusterRole", "metadata": {"name": "c"}})[1].endswith("/clusterroles/c")
    with pytest.raises(ValueError, match="no namespace"):
        object_path(role)
    with pytest.raises(ValueError, match="'Deployment' is not one of"):
        object_path({"kind": "Deployment", "metadata": {"name": "d"}}, "ns")


def test_nodes_get_distinct_loopback_pod_cidrs() -> None:
    config = ControlPlaneConfig(nodes=3)
    cidrs = [_node(f"n{i}", i, config)["spec"]["podCIDR"] for i in range(3)]
    assert cidrs == ["127.1.0.0/24", "127.1.1.0/24", "127.1.2.0/24"]
    with pytest.raises(ValueError, match="nodes=0"):
        ControlPlaneConfig(nodes=0)
    with pytest.raises(ValueError, match="nodes=251"):
        ControlPlaneConfig(nodes=251)


def test_kubeconfig_embeds_ca_and_token(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n")
    path = Credentials("https://127.0.0.1:6443", ca, "tok", "me").write_kubeconfig(tmp_path / "kc", namespace="ns")
    config = yaml.safe_load(path.read_text())
    assert config["users"] == [{"name": "me", "user": {"token": "tok"}}]
    assert config["contexts"][0]["context"] == {"cluster": "testbed", "user": "me", "namespace": "ns"}
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert path.stat().st_mode & 0o777 == 0o600


def test_wait_for_returns_the_value_or_times_out_naming_what() -> None:
    calls = iter([None, False, "done"])
    assert wait_for("third call", lambda: next(calls), timeout_s=5, interval_s=0) == "done"
    with pytest.raises(TimeoutError, match="waiting for never; last seen: None"):
        wait_for("never", lambda: None, timeout_s=0.05, interval_s=0.01)


def test_has_condition_tolerates_unfilled_status() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}]}}
    assert has_condition(ready, "Ready")
    assert not has_condition(ready, "Degraded") and has_condition(ready, "Degraded", "False")
    assert not has_condition({"status": {"conditions": None}}, "Established")  # a CRD just created
    assert not has_condition({"status": None}, "Ready") and not has_condition({}, "Ready")


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_process_group_stops_everything_even_what_ignores_sigterm(tmp_path: Path) -> None:
    group = ProcessGroup(tmp_path)
    polite = group.start("polite", [sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = group.start(
        "stubborn",
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True);"
            " time.sleep(60)",
        ],
    )
    wait_for("stubborn started", lambda: "up" in stubborn.log_tail(), timeout_s=10, interval_s=0.02)
    group.stop_all(grace_s=0.5)
    assert polite.popen.returncode == -signal.SIGTERM
    assert stubborn.popen.returncode == -signal.SIGKILL
    assert not group.processes
    group.stop_all()  # idempotent


def test_a_dead_process_is_reported_with_its_log(tmp_path: Path) -> None:
    group = ProcessGroup(tmp_path)
    proc = group.start("crasher", [sys.executable, "-c", "print('bind: address already in use'); raise SystemExit(3)"])
    proc.popen.wait(timeout=10)
    with pytest.raises(ProcessError, match=r"crasher \(pid \d+\) exited with code 3(.|\n)*address already in use"):
        group.guard(lambda: True)()
    group.stop_all()


def test_children_die_with_their_parent(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: even a SIGKILLed pytest leaves no etcd or apiserver behind."""
    script = (
        "import sys; from pathlib import Path; from e2e.cluster.processes import ProcessGroup;"
        f"g = ProcessGroup(Path({str(tmp_path)!r}));"
        "p = g.start('child', [sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(p.pid, flush=True); import time; time.sleep(60)"
    )
    repo = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=repo)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid)


def _fake_binaries() -> Binaries:
    return Binaries(*(Path(f"/nonexistent/{i}") for i in range(8)))


def test_start_is_retried_only_after_a_port_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[Path] = []

    def clash_once(binaries: Binaries, workdir: Path, config: object, processes: ProcessGroup) -> ControlPlane:
        attempts.append(workdir)
        if len(attempts) == 1:
            raise ProcessError("etcd (pid 1) exited with code 1; log tail:\nlisten tcp: bind: address already in use")
        return ControlPlane(workdir, None, None, workdir / "kc", "http://e", [], {}, processes)  # type: ignore[arg-type]

    monkeypatch.setattr(controlplane, "_start", clash_once)
    plane = controlplane.start_control_plane(_fake_binaries(), tmp_path)
    assert attempts == [tmp_path, tmp_path / "attempt-2"] and plane.workdir == tmp_path / "attempt-2"


def test_start_gives_up_on_other_failures_and_repeated_clashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(binaries: Binaries, workdir: Path, config: object, processes: ProcessGroup) -> ControlPlane:
        raise ProcessError("kube-apiserver (pid 2) exited with code 1; log tail:\ninvalid flag")

    monkeypatch.setattr(controlplane, "_start", crash)
    with pytest.raises(ProcessError, match="invalid flag"):
        controlplane.start_control_plane(_fake_binaries(), tmp_path / "a")
    assert not (tmp_path / "a" / "attempt-2").exists()

    calls = []

    def always_clash(binaries: Binaries, workdir: Path, config: object, processes: ProcessGroup) -> ControlPlane:
        calls.append(workdir)
        raise ProcessError("address already in use")

    monkeypatch.setattr(controlplane, "_start", always_clash)
    with pytest.raises(ProcessError, match="address already in use"):
        controlplane.start_control_plane(_fake_binaries(), tmp_path / "b")
    assert len(calls) == controlplane.START_ATTEMPTS


def test_build_script_refuses_unknown_components() -> None:
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "etcd", "kubelet"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert (
        "unknown component 'kubelet' (choose from: kubernetes kubernetes-node coredns pause etcd kwok helm promtool)"
        in (result.stderr)
    )
