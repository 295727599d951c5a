"""A real Kubernetes node next to the kwok ones: containerd + runc + CNI bridge, the kubelet, kube-proxy and CoreDNS,
all inside the node's network and mount namespaces (``nodenet``), registered with the test bed's control plane.

Invariants:
- Every process is started by the test bed and tracked by PID; containers are reaped through containerd, and any
  process left in the node's namespaces (containerd's shims) or in its pods' cgroups is killed by PID on the way out.
- Images come from the local image store (podman or docker), streamed into containerd with ``ctr images import``
  and labelled with their source image ID: an image already imported with the same ID is not imported again, and
  containerd's root (the content store) persists across sessions for that purpose.
- The node is tainted: only pods that tolerate ``NODE_TAINT_KEY`` (the node tests' pods) run on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .binaries import NodeBinaries
from .client import KubeClient, has_condition, wait_for
from .controlplane import KUBERNETES_SERVICE_IP, REAL_NODE_NAME, ControlPlane
from .nodeconfig import (
    NODE_TAINT_KEY,
    PAUSE_IMAGE,
    NodePaths,
    cni_config,
    containerd_config,
    corefile,
    dump_yaml,
    kube_proxy_config,
    kubelet_config,
)
from .nodenet import NodeNetwork, processes_in_netns
from .oci import single_binary_image
from .processes import ProcessGroup

SETUP_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "node_setup.sh"
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
SOURCE_ID_LABEL = "dev.paged.source-image-id"
CONTAINERD_NAMESPACE = "k8s.io"
# The tolerations and node selector a pod needs to run on the real node (and only there).
TOLERATIONS = [{"key": NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
NODE_SELECTOR = {NODE_TAINT_KEY: "true"}


def ensure_node_packages() -> None:
    """Install the node's Debian packages where missing (scripts/node_setup.sh; a no-op when all are there)."""
    result = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{SETUP_SCRIPT} failed ({result.returncode}):\n{result.stderr[-4000:]}")


def _which(name: str, *candidates: str) -> str:
    found = shutil.which(name) or next((c for c in candidates if os.access(c, os.X_OK)), None)
    if found is None:
        raise RuntimeError(f"{name} is not installed; scripts/node_setup.sh installs the node's Debian packages")
    return found


def _cni_bin_dir() -> str:
    for directory in CNI_BIN_DIRS:
        if Path(directory, "bridge").exists() and Path(directory, "host-local").exists():
            return directory
    raise RuntimeError(f"no CNI plugins in {CNI_BIN_DIRS}; scripts/node_setup.sh installs containernetworking-plugins")


@dataclass
class RealNode:
    name: str
    network: NodeNetwork
    paths: NodePaths
    processes: ProcessGroup = field(repr=False)
    ctr_argv: list[str] = field(repr=False)
    cluster_dns: str = ""
    startup_s: float = 0.0
    image_imports: dict[str, float] = field(default_factory=dict)

    @property
    def ip(self) -> str:
        return self.network.addrs.node_ip

    def ctr(self, *args: str, input_stream: int | None = None, timeout: float = 120) -> str:
        result = subprocess.run(
            [*self.ctr_argv, *args], stdin=input_stream, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def ensure_running(self) -> None:
        self.processes.ensure_running()

    def image_source_ids(self) -> dict[str, str]:
        """Imported image name -> the source image ID it was imported from (absent when not labelled)."""
        ids: dict[str, str] = {}
        for line in self.ctr("images", "ls").splitlines()[1:]:
            fields = line.split()
            if not fields:
                continue
            for label in fields[-1].split(","):
                key, _, value = label.partition("=")
                if key == SOURCE_ID_LABEL:
                    ids[fields[0]] = value
        return ids

    def import_images(self, refs: Iterable[str], tool: str) -> dict[str, float]:
        """Import each image from ``tool``'s store (``scripts/container.sh``, i.e. podman or docker) unless containerd
        already holds it at the same image ID; returns the seconds each import took (0 for a cached one)."""
        have = self.image_source_ids()
        took: dict[str, float] = {}
        for ref in refs:
            source_id = subprocess.run(
                [tool, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True, check=True
            ).stdout.strip()
            if have.get(ref) == source_id:
                took[ref] = 0.0
                continue
            started = time.monotonic()
            save = subprocess.Popen([tool, "save", ref], stdout=subprocess.PIPE)
            assert save.stdout is not None
            try:
                # The engine image is several GB: stream it, never a temporary tar file.
                self.ctr("images", "import", "-", input_stream=save.stdout.fileno(), timeout=1800)
            finally:
                save.stdout.close()
                if save.wait() != 0:
                    raise RuntimeError(f"{tool} save {ref} exited {save.returncode}")
            self.ctr("images", "label", ref, f"{SOURCE_ID_LABEL}={source_id}")
            took[ref] = time.monotonic() - started
        self.image_imports.update(took)
        self._remove_superseded()
        return took

    def _remove_superseded(self) -> None:
        """Remove the by-ID references (``sha256:...``) of images no name points to any more: an image rebuilt and
        imported again leaves its predecessor's, whose layers containerd then collects."""
        rows = [line.split() for line in self.ctr("images", "ls").splitlines()[1:] if line.strip()]
        named = {row[2] for row in rows if not row[0].startswith("sha256:")}
        for row in rows:
            if row[0].startswith("sha256:") and row[2] not in named:
                self.ctr("images", "rm", "--sync", row[0])

    def stop(self) -> None:
        """Stop the node's services, reap every container, stop containerd, then kill whatever still runs in the
        node's namespaces or its pods' cgroups. Safe to call more than once."""
        for name in ("kube-proxy", "coredns", "kubelet"):
            self.processes.stop(name)
        with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
            if any(p.name == "containerd" and p.popen.poll() is None for p in self.processes.processes):
                self._remove_containers()
        self.processes.stop_all()
        reap_namespace(self.network)
        remove_pod_cgroups()

    def _remove_containers(self) -> None:
        for task in self.ctr("tasks", "ls", "-q").split():
            with contextlib.suppress(RuntimeError):
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 20
        for task in self.ctr("tasks", "ls", "-q").split():
            while time.monotonic() < deadline:
                try:
                    self.ctr("tasks", "delete", "--force", task)
                    break
                except RuntimeError:
                    time.sleep(0.2)
        for container in self.ctr("containers", "ls", "-q").split():
            with contextlib.suppress(RuntimeError):
                self.ctr("containers", "delete", container)


def reap_namespace(network: NodeNetwork) -> list[int]:
    """SIGKILL every process in the node's network namespace but the holder (containerd's shims, which containerd
    started and which outlive it), found by namespace inode; returns their PIDs."""
    try:
        net_inode = network.namespace_inodes()[0]
    except FileNotFoundError:
        return []
    killed = []
    for pid in processes_in_netns(net_inode):
        if pid != network.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def pod_cgroup_dirs() -> list[Path]:
    """The node's pod cgroups in every v1 hierarchy: containerd puts them under ``/<cgroup parent>``, which the
    kubelet without per-QoS cgroups leaves empty, i.e. ``/k8s.io`` (containerd's namespace). One real node per
    machine, so the folder is the node's alone."""
    root = Path("/sys/fs/cgroup")
    return sorted(p / CONTAINERD_NAMESPACE for p in root.iterdir() if (p / CONTAINERD_NAMESPACE).is_dir())


def remove_pod_cgroups() -> None:
    """Kill what is left in the pods' cgroups (by PID) and remove the cgroup folders, deepest first."""
    for base in pod_cgroup_dirs():
        for procs in base.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        dirs = sorted((d for d in base.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
        for directory in [*dirs, base]:
            for _ in range(50):  # a killed process leaves its cgroup a moment later
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def start_real_node(
    plane: ControlPlane, network: NodeNetwork, binaries: NodeBinaries, paths: NodePaths, timeout_s: float = 180
) -> RealNode:
    """Start containerd, CoreDNS, the kubelet and kube-proxy in the node's namespaces, import the pause image, and
    wait until the node is Ready and a Service ClusterIP routes (the API server through ``kubernetes``). On failure
    everything started so far is stopped and cleaned up."""
    started = time.monotonic()
    addrs = network.addrs
    runc, containerd, ctr = _which("runc", "/usr/sbin/runc"), _which("containerd"), _which("ctr")
    for directory in (paths.workdir, paths.containerd_root, paths.pod_logs, paths.kubelet_root):
        directory.mkdir(parents=True, exist_ok=True)
    _write(paths.containerd_config, containerd_config(paths, runc, _cni_bin_dir()))
    _write(paths.cni_conf_dir / "10-paged.conflist", json.dumps(cni_config(addrs, paths), indent=2))
    processes = ProcessGroup(paths.workdir)
    node = RealNode(
        name=REAL_NODE_NAME,
        network=network,
        paths=paths,
        processes=processes,
        ctr_argv=[ctr, f"--address={paths.containerd_socket}", f"--namespace={CONTAINERD_NAMESPACE}"],
        cluster_dns=addrs.node_ip,
    )
    try:
        remove_pod_cgroups()  # a previous session's, should it have been killed before cleaning up
        processes.start("containerd", network.enter([containerd, f"--config={paths.containerd_config}"]))
        wait_for("containerd", processes.guard(lambda: _answers(node)), timeout_s, interval_s=0.2)
        node._remove_containers()  # a previous session's: containerd's root (and so its metadata) persists
        _import_pause(node, binaries.pause)

        creds = plane.component_credentials
        kubeconfigs = {n: c.write_kubeconfig(paths.workdir / f"{n}.kubeconfig") for n, c in creds.items()}
        with plane.admin_client() as admin:
            _grant_coredns(admin, creds["coredns"].user)
        _write(paths.corefile, corefile(kubeconfigs["coredns"], addrs.node_ip))
        processes.start("coredns", network.enter([binaries.coredns, "-conf", paths.corefile]))

        _write(paths.kubelet_config, dump_yaml(kubelet_config(addrs, paths, cluster_dns=node.cluster_dns)))
        processes.start(
            "kubelet",
            network.enter([
                binaries.kubelet,
                f"--config={paths.kubelet_config}",
                f"--kubeconfig={kubeconfigs['kubelet']}",
                f"--root-dir={paths.kubelet_root}",
                f"--node-ip={addrs.node_ip}",
                f"--hostname-override={node.name}",
                f"--node-labels={NODE_TAINT_KEY}=true",
                "--v=1",
            ]),
        )  # fmt: skip
        _write(paths.kube_proxy_config, dump_yaml(kube_proxy_config(addrs, kubeconfigs["kube-proxy"], node.name)))
        processes.start("kube-proxy", network.enter([binaries.kube_proxy, f"--config={paths.kube_proxy_config}"]))
        with plane.admin_client() as admin:
            wait_for(
                f"node {node.name} Ready",
                processes.guard(lambda: has_condition(admin.get(f"/api/v1/nodes/{node.name}"), "Ready")),
                timeout_s,
                interval_s=0.5,
            )
        wait_for(
            f"the kubernetes Service at {KUBERNETES_SERVICE_IP} (kube-proxy)",
            processes.guard(lambda: _service_routes(plane)),
            timeout_s,
            interval_s=0.5,
        )
    except BaseException:
        node.stop()
        raise
    node.startup_s = time.monotonic() - started
    return node


def _answers(node: RealNode) -> bool:
    if not node.paths.containerd_socket.exists():
        return False
    try:
        node.ctr("version", timeout=10)
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
    return True


def _import_pause(node: RealNode, pause: Path) -> None:
    """The sandbox image, from the pause binary; re-imported only when the binary changed."""
    digest = subprocess.run(["sha256sum", str(pause)], capture_output=True, text=True, check=True).stdout[:64]
    if node.image_source_ids().get(PAUSE_IMAGE) == digest:
        return
    archive = single_binary_image(pause, PAUSE_IMAGE, node.paths.workdir / "pause.oci.tar")
    with archive.open("rb") as f:
        node.ctr("images", "import", "-", input_stream=f.fileno())
    node.ctr("images", "label", PAUSE_IMAGE, f"{SOURCE_ID_LABEL}={digest}")
    archive.unlink()


def _grant_coredns(admin: KubeClient, user: str) -> None:
    """What CoreDNS's kubernetes plugin reads, bound to its user (the same rules as CoreDNS's own manifests)."""
    name, read = "paged-testbed:coredns", ["list", "watch"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": read},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    admin.apply(f"{rbac}/clusterroles/{name}", role, "paged-testbed", force=True)
    admin.apply(f"{rbac}/clusterrolebindings/{name}", binding, "paged-testbed", force=True)


def _service_routes(plane: ControlPlane) -> bool:
    """The API server answers at the `kubernetes` Service's ClusterIP: kube-proxy's rules are in place and the
    host routes the Service range into the node's namespace."""
    tls = ssl.create_default_context(cafile=plane.pki.ca_cert)
    try:
        response = httpx.get(
            f"https://{KUBERNETES_SERVICE_IP}/readyz",
            verify=tls,
            headers={"Authorization": f"Bearer {plane.admin.token}"},
            timeout=3,
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


__all__ = ["NODE_SELECTOR", "TOLERATIONS", "RealNode", "ensure_node_packages", "start_real_node"]
