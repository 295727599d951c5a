"""pytest fixtures for tests against the real control plane (register with ``pytest_plugins`` in the root
conftest). The first test that asks for ``kube_cluster`` builds the binaries if needed and starts the control
plane, once per session; every process is stopped by PID at the end of the session, on failure, Ctrl-C or SIGTERM.

Fixtures:
  kube_binaries       session   paths of the pinned binaries (built on first use)
  kube_cluster        session   the running ControlPlane: server URL, CA, admin credentials and kubeconfig
  kube_faulty_cluster module    a ControlPlane of the module's own, whose API server tests may restart and whose
                                etcd they may pause (``stop_apiserver`` ...): the session's cluster is unaffected;
                                after each test it is running again (the function-scoped ``kube_faults``)
  kube_admin          session   a KubeClient acting as cluster admin
  kube_namespace      function  a fresh namespace (its default ServiceAccount exists), deleted afterwards
  kube_service_account function factory: a ServiceAccount with given RBAC rules -> ServiceAccountAccess
  kube_chart_access   function  factory: a chart's own RBAC (helm template) applied -> access as its ServiceAccount
  kube_node           session   a real node (containerd, kubelet, kube-proxy, CoreDNS) registered with kube_cluster;
                                opt-in: only a session with a test that asks for it starts one (as root)
  kube_node_binaries  session   kubelet, kube-proxy, kubectl, CoreDNS and pause (built on first use)

A session that will start the real node creates the node's network first and starts the control plane on the
host's end of the node's link (not loopback), so that the kubelet and pods reach the API server; kwok tests in the
same session use it all the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .access import CreatedObjects, ServiceAccountAccess, create_rbac, grant, service_account_access
from .binaries import Binaries, NodeBinaries, ensure_binaries, ensure_node_binaries
from .client import KubeClient, wait_for
from .controlplane import ControlPlane, ControlPlaneConfig, running_control_plane
from .helm import render_chart
from .node import RealNode, ensure_node_packages, start_real_node
from .nodeconfig import NodePaths
from .nodenet import NodeNetwork, start_node_network

NODE_FIXTURE = "kube_node"
# One real node per machine (its addresses and containerd's root are fixed); a second session waits this long.
NODE_LOCK_WAIT_S = 1800


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    # pytest unwinds a KeyboardInterrupt through its finalizers, so a SIGTERM'd run still stops the control plane.
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used the control plane says where the components' logs are."""
    report = yield
    plane = getattr(item, "funcargs", {}).get("kube_cluster")
    if report.failed and isinstance(plane, ControlPlane):
        report.sections.append(("kube control plane", f"component logs: {plane.workdir}/*.log"))
    node = getattr(item, "funcargs", {}).get(NODE_FIXTURE)
    if report.failed and isinstance(node, RealNode):
        report.sections.append(("real node", f"logs: {node.paths.workdir}/*.log, pods: {node.paths.pod_logs}"))
    return report


def _uncaptured(request: pytest.FixtureRequest) -> contextlib.AbstractContextManager[object]:
    """Output shown live: a cold build runs for minutes, and its progress should not be captured."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:  # pytest -p no:capture: nothing to get out of the way
        return contextlib.nullcontext()
    return capture.global_and_fixture_disabled()


@pytest.fixture(scope="session")
def kube_binaries(request: pytest.FixtureRequest) -> Binaries:
    with _uncaptured(request):
        return ensure_binaries()


@pytest.fixture(scope="session")
def kube_node_binaries(request: pytest.FixtureRequest) -> NodeBinaries:
    with _uncaptured(request):
        return ensure_node_binaries()


def _node_home() -> Path:
    return Path(os.environ.get("PAGED_CACHE", Path.home() / ".cache" / "paged")) / "node"


@contextlib.contextmanager
def _node_lock(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        deadline = time.monotonic() + NODE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another session has held {home}/.lock for {NODE_LOCK_WAIT_S} s") from None
                time.sleep(1)
        yield


@dataclass
class NodeNetworkSlot:
    """The real node's network for the session: ``network`` when one was asked for and started, else None with
    ``unavailable`` saying why (only the node's tests fail then; kwok tests run on loopback as always)."""

    network: NodeNetwork | None = None
    unavailable: str = ""


@pytest.fixture(scope="session")
def kube_node_network(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeNetworkSlot]:
    """The real node's namespaces and link, when some test of the session asks for ``kube_node``."""
    if not any(NODE_FIXTURE in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield NodeNetworkSlot(unavailable="no test of this session asked for the real node")
        return
    with contextlib.ExitStack() as stack:
        try:
            ensure_node_packages()
            stack.enter_context(_node_lock(_node_home()))
            network = start_node_network(tmp_path_factory.mktemp("node-net"), _node_home() / "netns")
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
            slot = NodeNetworkSlot(unavailable=f"{type(exc).__name__}: {exc}")
        else:
            stack.callback(network.stop)
            slot = NodeNetworkSlot(network)
        yield slot


@pytest.fixture(scope="session")
def kube_cluster(
    kube_binaries: Binaries, kube_node_network: NodeNetworkSlot, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt) if in_main_thread else None
    network = kube_node_network.network
    config = ControlPlaneConfig(address=network.addrs.host_ip) if network else None
    try:
        with running_control_plane(kube_binaries, tmp_path_factory.mktemp("kube"), config) as plane:
            yield plane
            plane.ensure_running()  # a component that died mid-session fails the session's last test loudly
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def kube_faulty_cluster(kube_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_control_plane(
        kube_binaries, tmp_path_factory.mktemp("kube-faulty"), ControlPlaneConfig(nodes=1)
    ) as plane:
        yield plane


@pytest.fixture
def kube_faults(kube_faulty_cluster: ControlPlane) -> Iterator[ControlPlane]:
    """``kube_faulty_cluster`` for one test that injects faults: whatever it leaves stopped or paused runs again
    afterwards, so the next test starts on a healthy control plane."""
    yield kube_faulty_cluster
    kube_faulty_cluster.resume_etcd()
    kube_faulty_cluster.start_apiserver()
    kube_faulty_cluster.ensure_running()


@pytest.fixture(scope="session")
def kube_node(
    kube_cluster: ControlPlane,
    kube_node_network: NodeNetworkSlot,
    kube_node_binaries: NodeBinaries,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    if kube_node_network.network is None:
        raise RuntimeError(f"the real node cannot start here: {kube_node_network.unavailable}")
    paths = NodePaths(tmp_path_factory.mktemp("node"), containerd_root=_node_home() / "containerd")
    node = start_real_node(kube_cluster, kube_node_network.network, kube_node_binaries, paths)
    try:
        yield node
        node.ensure_running()
    finally:
        node.stop()


@pytest.fixture(scope="session")
def kube_admin(kube_cluster: ControlPlane) -> Iterator[KubeClient]:
    with kube_cluster.admin_client() as client:
        yield client


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{stem or 't'}-{secrets.token_hex(3)}"


@pytest.fixture
def kube_namespace(kube_admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = _namespace_name(request.node.name)
    kube_admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods are refused until the namespace's default ServiceAccount exists; the controller-manager adds it.
    wait_for(
        f"ServiceAccount {name}/default",
        lambda: kube_admin.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout_s=30,
    )
    yield name
    kube_admin.delete(f"/api/v1/namespaces/{name}")


ServiceAccountFactory = Callable[..., ServiceAccountAccess]


@pytest.fixture
def kube_service_account(
    kube_admin: KubeClient, kube_namespace: str, tmp_path: Path
) -> Iterator[ServiceAccountFactory]:
    """``factory(name, rules=[...], cluster_rules=[...])``: a ServiceAccount in the test's namespace bound to exactly
    those RBAC rules, with a kubeconfig at ``access.kubeconfig``."""
    created = CreatedObjects()

    def factory(
        name: str,
        *,
        rules: Sequence[Mapping[str, Any]] = (),
        cluster_rules: Sequence[Mapping[str, Any]] = (),
    ) -> ServiceAccountAccess:
        grant(kube_admin, kube_namespace, name, created, rules=rules, cluster_rules=cluster_rules)
        return service_account_access(kube_admin, kube_namespace, name, tmp_path / f"{name}.kubeconfig")

    yield factory
    created.delete_all(kube_admin)


@pytest.fixture
def kube_chart_access(
    kube_admin: KubeClient, kube_namespace: str, kube_binaries: Binaries, tmp_path: Path
) -> Iterator[Callable[..., ServiceAccountAccess]]:
    """``factory(chart_dir, service_account, release="test", set_values={...})``: render the chart with helm into the
    test's namespace, create its ServiceAccounts, Roles, ClusterRoles and bindings as the chart writes them, and
    return access as ``service_account``: the operator's tests run with the chart's permissions, no more."""
    created = CreatedObjects()

    def factory(
        chart: Path,
        service_account: str,
        *,
        release: str = "test",
        set_values: Mapping[str, str] | None = None,
    ) -> ServiceAccountAccess:
        objects = render_chart(kube_binaries.helm, chart, release, kube_namespace, set_values=set_values)
        create_rbac(kube_admin, objects, kube_namespace, created)
        return service_account_access(
            kube_admin, kube_namespace, service_account, tmp_path / f"{service_account}.kubeconfig"
        )

    yield factory
    created.delete_all(kube_admin)
