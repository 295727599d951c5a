"""The real node's network: a network and mount namespace of its own, joined to the host by one veth pair.

Invariants:
- Everything the node creates (the CNI bridge, the pods' veths and network namespaces, the kubelet's and kube-proxy's
  iptables chains, containerd's and the kubelet's mounts) lives in these namespaces, so it vanishes with them when
  their last process exits: nothing is left on the host for a cleanup to miss.
- The namespace has no default route. A pod reaches pods, the node and the host's end of the link, nothing else.
- The host gains only routes to the pod and Service ranges via the node's address: into the namespace, on this
  machine. No route leads to another machine.

``NodeAddresses`` and the command lists are pure; ``NodeNetwork`` runs them (as root).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .client import wait_for
from .controlplane import SERVICE_CIDR
from .processes import ManagedProcess, ProcessGroup

# Host paths the node's processes write to that cannot be moved by a flag; each gets a tmpfs inside the mount
# namespace, so their contents live and die with the node. /var/lib/cni: the CNI result cache; /var/log/containers:
# the kubelet's symlinks to container logs.
PRIVATE_TMPFS = ("/var/lib/cni", "/var/log/containers")


@dataclass(frozen=True)
class NodeAddresses:
    """Addresses and interface names of the node's network. The defaults avoid 127/8, the host's own networks and
    the Service range; one node runs on a machine at a time (the node fixture holds a lock), so they are fixed."""

    link_cidr: str = "10.250.0.0/30"
    pod_cidr: str = "10.244.0.0/24"
    service_cidr: str = SERVICE_CIDR
    host_link: str = "paged-node0"  # the host's end of the veth
    node_link: str = "eth0"  # the node's end, inside the namespace
    bridge: str = "paged0"  # the CNI bridge, created by the bridge plugin inside the namespace

    def __post_init__(self) -> None:
        nets = [ipaddress.ip_network(c) for c in (self.link_cidr, self.pod_cidr, self.service_cidr)]
        for i, a in enumerate(nets):
            for b in nets[i + 1 :]:
                if a.overlaps(b):
                    raise ValueError(f"node network ranges {a} and {b} overlap")
        if nets[0].num_addresses < 4:
            raise ValueError(f"link_cidr={self.link_cidr}: needs room for two addresses (a /30 or larger)")
        if any(len(n) > 15 for n in (self.host_link, self.node_link, self.bridge)):
            raise ValueError("interface names are limited to 15 characters")

    def _host(self, cidr: str, index: int) -> str:
        return str(list(ipaddress.ip_network(cidr).hosts())[index])

    @property
    def host_ip(self) -> str:
        """The host's end of the link: where the API server listens, reachable from the node and its pods."""
        return self._host(self.link_cidr, 0)

    @property
    def node_ip(self) -> str:
        """The node's InternalIP (the kubelet refuses a loopback one)."""
        return self._host(self.link_cidr, 1)

    @property
    def pod_gateway(self) -> str:
        return self._host(self.pod_cidr, 0)

    @property
    def link_prefix(self) -> int:
        return ipaddress.ip_network(self.link_cidr).prefixlen


def host_commands(addrs: NodeAddresses, holder_pid: int) -> list[list[str]]:
    """Run on the host: the veth pair with one end moved into the holder's namespace, and routes to the pod and
    Service ranges through it."""
    return [
        ["ip", "link", "add", addrs.host_link, "type", "veth", "peer", "name", addrs.node_link,
         "netns", str(holder_pid)],
        ["ip", "addr", "add", f"{addrs.host_ip}/{addrs.link_prefix}", "dev", addrs.host_link],
        ["ip", "link", "set", addrs.host_link, "up"],
        ["ip", "route", "add", addrs.pod_cidr, "via", addrs.node_ip, "dev", addrs.host_link],
        ["ip", "route", "add", addrs.service_cidr, "via", addrs.node_ip, "dev", addrs.host_link],
    ]  # fmt: skip


def namespace_commands(addrs: NodeAddresses) -> list[list[str]]:
    """Run inside the namespaces: loopback and the node's end of the link up, forwarding between the link and the
    bridge, bridged pod traffic through iptables (kube-proxy's DNAT of pod-to-Service-to-pod on one bridge needs
    it), and the private tmpfs mounts."""
    commands = [
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", f"{addrs.node_ip}/{addrs.link_prefix}", "dev", addrs.node_link],
        ["ip", "link", "set", addrs.node_link, "up"],
        ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        ["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"],
    ]
    commands += [["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", path] for path in PRIVATE_TMPFS]
    return commands


@dataclass
class NodeNetwork:
    """A running holder process that owns the namespaces, with the link set up. ``enter`` prefixes a command so
    that it runs inside both namespaces (nsenter execs it: the PID stays the command's own)."""

    addrs: NodeAddresses
    holder: ManagedProcess
    processes: ProcessGroup = field(repr=False)
    #: Where the namespace's inode is recorded while it exists, for ``reap_previous`` after a killed session.
    record: Path | None = None

    @property
    def pid(self) -> int:
        return self.holder.pid

    def enter(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        return ["nsenter", f"--target={self.pid}", "--net", "--mount", "--", *map(os.fspath, argv)]

    def run(self, argv: Sequence[str | os.PathLike[str]], timeout: float = 60) -> str:
        result = subprocess.run(self.enter(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} (in the node's namespaces) failed: {result.stderr.strip()}")
        return result.stdout

    def namespace_inodes(self) -> tuple[int, int]:
        """(net, mnt) namespace inodes: what identifies the node's processes, e.g. for reaping leftovers."""
        return (os.stat(f"/proc/{self.pid}/ns/net").st_ino, os.stat(f"/proc/{self.pid}/ns/mnt").st_ino)

    def stop(self) -> None:
        """Stop the holder. With it gone (and the node's processes stopped before), the kernel frees both
        namespaces: the link, its routes, the bridge, the iptables rules and the mounts go with them."""
        self.processes.stop_all(grace_s=5)
        with contextlib.suppress(subprocess.CalledProcessError):  # already gone with the namespace
            subprocess.run(["ip", "link", "del", self.addrs.host_link], capture_output=True, check=True)
        if self.record is not None:
            self.record.unlink(missing_ok=True)


def processes_in_netns(net_inode: int) -> list[int]:
    """PIDs of the processes (other than this one) whose network namespace has this inode."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == net_inode:
                    pids.append(int(entry.name))
    return pids


def reap_previous(record: Path, addrs: NodeAddresses) -> list[int]:
    """After a session that was killed outright: SIGKILL what still runs in its node namespace (containerd's shims
    outlive their parent) and remove its link, so this session can create its own. Returns the PIDs killed."""
    killed: list[int] = []
    with contextlib.suppress(FileNotFoundError, ValueError):
        for pid in processes_in_netns(int(record.read_text())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    subprocess.run(["ip", "link", "del", addrs.host_link], capture_output=True, check=False)
    record.unlink(missing_ok=True)
    return killed


def _run(argv: Sequence[str]) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def start_node_network(workdir: Path, record: Path, addrs: NodeAddresses | None = None) -> NodeNetwork:
    """Create the namespaces (a holder process started by ``unshare``, tracked by PID like every test-bed process)
    and the link, after reaping what a killed session left (``record`` names its namespace; it is rewritten).
    Needs root. On failure everything created so far is removed."""
    addrs = addrs or NodeAddresses()
    if os.geteuid() != 0:
        raise RuntimeError("the real node needs root (network namespaces, mounts, cgroups)")
    reap_previous(record, addrs)
    workdir.mkdir(parents=True, exist_ok=True)
    for path in PRIVATE_TMPFS:  # mount points; the tmpfs itself exists only inside the namespace
        Path(path).mkdir(parents=True, exist_ok=True)
    processes = ProcessGroup(workdir)
    # unshare execs sleep in the new namespaces (no --fork), so the holder's PID is the namespaces' first process.
    holder = processes.start("netns-holder", ["unshare", "--net", "--mount", "--propagation", "private", "--",
                                              "sleep", "infinity"])  # fmt: skip
    network = NodeNetwork(addrs, holder, processes, record)
    try:
        _wait_unshared(holder)
        record.write_text(str(network.namespace_inodes()[0]))
        for argv in host_commands(addrs, holder.pid):
            _run(argv)
        for argv in namespace_commands(addrs):
            network.run(argv)
    except BaseException:
        network.stop()
        raise
    return network


def _wait_unshared(holder: ManagedProcess, timeout_s: float = 10.0) -> None:
    """Until the holder runs in namespaces other than ours (unshare has exec'd sleep)."""
    ours = os.stat("/proc/self/ns/net").st_ino

    def unshared() -> bool:
        holder.ensure_running()
        try:
            return os.stat(f"/proc/{holder.pid}/ns/net").st_ino != ours and _exe(holder.pid) == "sleep"
        except FileNotFoundError:
            return False

    wait_for("the node's namespaces", unshared, timeout_s, interval_s=0.05)


def _exe(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""
