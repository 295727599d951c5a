"""Start and stop a real control plane on 127.0.0.1: etcd, kube-apiserver (TLS, token auth, RBAC),
kube-controller-manager, kube-scheduler and kwok with fake nodes whose pods get loopback IPs.

With a real node (``node.py``) the API server listens on the host's end of the node's link instead, so that the
kubelet and pods reach it, and it publishes that address as the ``kubernetes`` Service's endpoint."""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .binaries import Binaries
from .client import KubeClient, has_condition, wait_for
from .kubeconfig import Credentials
from .pki import Pki, make_pki
from .processes import ProcessError, ProcessGroup

# Fake nodes get pod CIDRs carved from 127.1.0.0/16: Linux routes all of 127.0.0.0/8 to the loopback interface, so a
# process that a test starts on a pod's IP is reachable at that IP, as a kubelet's pod would be.
POD_CIDR_BASE = "127.1"
NODE_IP = "127.0.0.1"
# Service ClusterIPs. Without a real node nothing routes there (no kube-proxy); with one, kube-proxy routes them
# inside the node's network namespace, and the host reaches them through that namespace only.
SERVICE_CIDR = "10.96.0.0/24"
# The `kubernetes` Service's ClusterIP (the range's first address), which in-cluster clients dial and verify.
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
# The real node's name: its kubelet's identity (system:node:<name>) is minted with the control plane's tokens.
REAL_NODE_NAME = "paged-node"
# Start-up is retried only when a component lost the race for its port (see free_port).
START_ATTEMPTS = 2


@dataclass(frozen=True)
class ControlPlaneConfig:
    nodes: int = 2
    node_cpu: str = "32"
    node_memory: str = "256Gi"
    node_pods: int = 110
    start_timeout_s: float = 120.0
    #: Where the API server listens and what it advertises: loopback for kwok only, the host's address on the real
    #: node's link when one runs (the kubelet refuses a loopback API server endpoint for pods).
    address: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 250:
            raise ValueError(f"nodes={self.nodes}: the test bed supports 1 to 250 fake nodes")
        try:
            ipaddress.IPv4Address(self.address)
        except ValueError as exc:
            raise ValueError(f"address={self.address!r}: must be an IPv4 address of this machine") from exc

    @property
    def loopback(self) -> bool:
        return ipaddress.IPv4Address(self.address).is_loopback


@dataclass
class ControlPlane:
    """A running control plane: where it is, how to authenticate, where its files and logs are."""

    workdir: Path
    pki: Pki
    admin: Credentials
    admin_kubeconfig: Path
    etcd_url: str
    node_names: list[str]
    #: Credentials of the real node's components (kubelet, kube-proxy, coredns), by component name.
    component_credentials: dict[str, Credentials] = field(repr=False)
    processes: ProcessGroup = field(repr=False)
    #: The API server's command line, to start it again on the same port with the same etcd (``start_apiserver``).
    apiserver_argv: list[str] = field(default_factory=list, repr=False)
    start_timeout_s: float = 120.0
    startup_s: float = 0.0

    @property
    def server(self) -> str:
        return self.admin.server

    # Control-plane faults, for tests that run on a control plane of their own (``kube_faulty_cluster``): every
    # other component keeps running and reconnects on its own, as in a cluster whose API server restarts.

    def stop_apiserver(self) -> None:
        """Stop the API server (SIGTERM, as a rolling restart of a control-plane node does)."""
        self.processes.stop("kube-apiserver")

    def start_apiserver(self) -> None:
        """Start the API server again with its first command line (same port, certificates and etcd) and wait until
        it is ready. A no-op while it runs."""
        if self.processes.find("kube-apiserver") is not None:
            return
        self.processes.start("kube-apiserver", self.apiserver_argv)
        _wait_healthy(
            self.processes, "kube-apiserver /readyz", f"{self.server}/readyz", self.pki.ca_cert,
            self.start_timeout_s, token=self.admin.token,
        )  # fmt: skip

    def pause_etcd(self) -> None:
        """Freeze etcd (SIGSTOP): its port stays open and every request to it hangs, as with a partitioned or
        overloaded etcd; the API server stays up."""
        self._signal_etcd(signal.SIGSTOP)

    def resume_etcd(self) -> None:
        """Let a paused etcd go on (SIGCONT); a no-op when it runs."""
        self._signal_etcd(signal.SIGCONT)

    def _signal_etcd(self, sig: signal.Signals) -> None:
        etcd = self.processes.find("etcd")
        if etcd is None:
            raise ProcessError("etcd is not running")
        etcd.ensure_running()
        os.kill(etcd.pid, sig)

    def admin_client(self) -> KubeClient:
        return KubeClient(self.admin)

    def ensure_running(self) -> None:
        """Raise with the log tail of any component that has exited."""
        self.processes.ensure_running()

    def stop(self) -> None:
        self.processes.stop_all()


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1; the tiny race until the component binds it is acceptable in
    tests, and a lost race shows as a component that exits with 'address already in use'."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str, ca: Path, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    tls = ssl.create_default_context(cafile=ca)
    try:
        response = httpx.get(url, verify=tls, headers=headers, timeout=5.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _wait_healthy(
    processes: ProcessGroup, what: str, url: str, ca: Path, timeout_s: float, token: str | None = None
) -> None:
    wait_for(f"{what} at {url}", processes.guard(lambda: _healthy(url, ca, token)), timeout_s, interval_s=0.25)


def _token_file(path: Path, tokens: dict[str, tuple[str, str]]) -> Path:
    """The API server's static token file: ``token,user,uid,"group1,group2"`` per line."""
    path.write_text("".join(f'{token},{user},{user},"{groups}"\n' for token, (user, groups) in tokens.items()))
    path.chmod(0o600)
    return path


def _node(name: str, index: int, config: ControlPlaneConfig) -> dict:
    resources = {"cpu": config.node_cpu, "memory": config.node_memory, "pods": str(config.node_pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"{POD_CIDR_BASE}.{index}.0/24", "podCIDRs": [f"{POD_CIDR_BASE}.{index}.0/24"]},
        "status": {"capacity": resources, "allocatable": resources},
    }


def _node_ready(client: KubeClient, name: str) -> bool:
    return has_condition(client.get(f"/api/v1/nodes/{name}"), "Ready")


def start_control_plane(binaries: Binaries, workdir: Path, config: ControlPlaneConfig | None = None) -> ControlPlane:
    """Start every component in dependency order and wait until the cluster can run a Deployment: API server ready,
    controller-manager and scheduler healthy, all fake nodes Ready, and the default ServiceAccount minted. On any
    failure every process started so far is stopped before the error propagates. Logs are in ``workdir`` (or
    ``workdir/attempt-2`` after a port clash)."""
    config = config or ControlPlaneConfig()
    started = time.monotonic()
    attempt = 1
    while True:
        attempt_dir = workdir / f"attempt-{attempt}" if attempt > 1 else workdir
        attempt_dir.mkdir(parents=True, exist_ok=True)
        processes = ProcessGroup(attempt_dir)
        try:
            plane = _start(binaries, attempt_dir, config, processes)
        except ProcessError as exc:
            processes.stop_all()
            # free_port() can lose a race with another process on the machine; anything else is a real failure.
            if "address already in use" in str(exc) and attempt < START_ATTEMPTS:
                attempt += 1
                continue
            raise
        except BaseException:
            processes.stop_all()
            raise
        plane.startup_s = time.monotonic() - started
        return plane


def _start(binaries: Binaries, workdir: Path, config: ControlPlaneConfig, processes: ProcessGroup) -> ControlPlane:
    timeout = config.start_timeout_s
    address = config.address
    # Pods dial the API server at the `kubernetes` Service's ClusterIP, or at the advertised address.
    names = (f"IP:{KUBERNETES_SERVICE_IP}",) if config.loopback else (f"IP:{KUBERNETES_SERVICE_IP}", f"IP:{address}")
    pki = make_pki(workdir / "pki", extra_names=names)
    ca = pki.ca_cert

    etcd_port, etcd_peer_port = free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    processes.start(
        "etcd",
        [
            binaries.etcd,
            "--name=testbed",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
            f"--initial-cluster=testbed=http://127.0.0.1:{etcd_peer_port}",
            "--unsafe-no-fsync",  # test data: durability is not needed, and fsync on a shared disk is slow
            "--log-level=warn",
        ],
    )
    wait_for(
        "etcd /health",
        processes.guard(lambda: _etcd_healthy(etcd_url)),
        timeout_s=timeout,
        interval_s=0.1,
    )

    # Static tokens: the admin for tests, and one identity per component with the RBAC roles Kubernetes bootstraps
    # for exactly these user names.
    identities = {
        "admin": ("paged-admin", "system:masters"),
        "controller-manager": ("system:kube-controller-manager", ""),
        "scheduler": ("system:kube-scheduler", ""),
        "kwok": ("kwok", "system:masters"),
        # The real node's components (node.py), under the names Kubernetes' bootstrap RBAC expects.
        "kubelet": (f"system:node:{REAL_NODE_NAME}", "system:nodes"),
        "kube-proxy": ("system:kube-proxy", ""),
        "coredns": ("paged-testbed:coredns", ""),
    }
    tokens = {name: secrets.token_hex(16) for name in identities}
    token_file = _token_file(workdir / "tokens.csv", {tokens[n]: identities[n] for n in identities})

    api_port = free_port()
    server = f"https://{address}:{api_port}"
    apiserver_argv = [
        binaries.kube_apiserver,
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--secure-port={api_port}",
        f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={ca}",
        f"--etcd-servers={etcd_url}",
        f"--token-auth-file={token_file}",
        "--authorization-mode=Node,RBAC",
        "--anonymous-auth=false",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_private_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # The reconciler would publish 127.0.0.1 as the `kubernetes` Service's endpoint, which endpoint
        # validation rejects as loopback; without a real node nothing routes through that Service anyway.
        *(["--endpoint-reconciler-type=none"] if config.loopback else []),
        "--allow-privileged=true",
        # The real node's kubelet registers its name as its Hostname address, which nothing resolves here;
        # logs, exec and port-forward dial its InternalIP instead.
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]
    processes.start("kube-apiserver", apiserver_argv)
    admin = Credentials(server=server, ca_cert=ca, token=tokens["admin"], user="paged-admin")
    _wait_healthy(processes, "kube-apiserver /readyz", f"{server}/readyz", ca, timeout, token=admin.token)

    def component_kubeconfig(name: str) -> Path:
        creds = Credentials(server=server, ca_cert=ca, token=tokens[name], user=identities[name][0])
        return creds.write_kubeconfig(workdir / f"{name}.kubeconfig")

    serving = [f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}"]
    cm_kubeconfig, cm_port = component_kubeconfig("controller-manager"), free_port()
    processes.start(
        "kube-controller-manager",
        [
            binaries.kube_controller_manager,
            f"--kubeconfig={cm_kubeconfig}",
            f"--authentication-kubeconfig={cm_kubeconfig}",
            f"--authorization-kubeconfig={cm_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={cm_port}",
            *serving,
            "--leader-elect=false",  # one instance: skipping the lease makes start-up faster
            "--use-service-account-credentials=true",
            f"--root-ca-file={ca}",
            f"--service-account-private-key-file={pki.sa_private_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
            # 1.36 skips a ReplicaSet sync while its informer lags the controller's own last write. On this quiet
            # test bed that once left a ReplicaSet's status unwritten for 90 s after its pods were Ready (no later
            # event woke it), so the Deployment never became available. Busy clusters advance the informer anyway.
            "--feature-gates=StaleControllerConsistencyReplicaSet=false",
        ],
    )
    sched_kubeconfig, sched_port = component_kubeconfig("scheduler"), free_port()
    processes.start(
        "kube-scheduler",
        [
            binaries.kube_scheduler,
            f"--kubeconfig={sched_kubeconfig}",
            f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            *serving,
            "--leader-elect=false",
            "--profiling=false",
        ],
    )
    processes.start(
        "kwok",
        [
            binaries.kwok,
            f"--kubeconfig={component_kubeconfig('kwok')}",
            f"--config={binaries.kwok_stages}",
            # Only the fake nodes: a real node's status is its kubelet's to write.
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # Pods on nodes without a podCIDR of their own still get loopback IPs.
            f"--cidr={POD_CIDR_BASE}.255.0/24",
            f"--node-ip={NODE_IP}",
            # Liveness through a node Lease kwok renews every few seconds, as a kubelet does (the stages heartbeat
            # the node's status only every ten minutes then). Without one the fake nodes' status heartbeat comes
            # about every 55 s, past the node-lifecycle controller's 50 s grace period: it marks the node Unknown
            # for a moment, and with it every pod on the node not Ready, which kwok never sets back.
            "--node-lease-duration-seconds=40",
        ],
    )

    admin_kubeconfig = admin.write_kubeconfig(workdir / "admin.kubeconfig")
    node_components = {
        name: Credentials(server=server, ca_cert=ca, token=tokens[name], user=identities[name][0])
        for name in ("kubelet", "kube-proxy", "coredns")
    }
    node_names = [f"kwok-node-{i}" for i in range(config.nodes)]
    with KubeClient(admin) as client:
        for i, name in enumerate(node_names):
            client.create("/api/v1/nodes", _node(name, i, config))
        _wait_healthy(
            processes, "kube-controller-manager /healthz", f"https://127.0.0.1:{cm_port}/healthz", ca, timeout
        )
        _wait_healthy(processes, "kube-scheduler /healthz", f"https://127.0.0.1:{sched_port}/healthz", ca, timeout)
        for name in node_names:
            wait_for(f"node {name} Ready", processes.guard(lambda n=name: _node_ready(client, n)), timeout)
        wait_for(
            "ServiceAccount default/default",
            processes.guard(lambda: client.exists("/api/v1/namespaces/default/serviceaccounts/default")),
            timeout,
        )
    return ControlPlane(
        workdir=workdir,
        pki=pki,
        admin=admin,
        admin_kubeconfig=admin_kubeconfig,
        etcd_url=etcd_url,
        node_names=node_names,
        component_credentials=node_components,
        processes=processes,
        apiserver_argv=[os.fspath(a) for a in apiserver_argv],
        start_timeout_s=timeout,
    )


def _etcd_healthy(url: str) -> bool:
    try:
        response = httpx.get(f"{url}/health", timeout=5.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.json().get("health") == "true"


@contextmanager
def running_control_plane(
    binaries: Binaries, workdir: Path, config: ControlPlaneConfig | None = None
) -> Iterator[ControlPlane]:
    """The control plane for the duration of a ``with`` block; every process is stopped on the way out."""
    plane = start_control_plane(binaries, workdir, config)
    try:
        yield plane
    finally:
        plane.stop()


__all__ = ["ControlPlane", "ControlPlaneConfig", "ProcessError", "running_control_plane", "start_control_plane"]
