"""The real node's configuration files, rendered from paths and addresses alone (pure; ``node.py`` writes and runs
them). Each setting that departs from a component's default is here because this VM or the test bed needs it; the
comments say why, and docs/testbed.md collects them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .nodenet import NodeAddresses

#: The sandbox ("pause") image: registry.k8s.io cannot be reached, so the test bed builds its own (any image whose
#: entrypoint sleeps forever serves) and names it here, for containerd's CRI plugin.
PAUSE_IMAGE = "localhost/paged/pause:testbed"
#: The taint and label of the real node: kwok tests' pods stay off it, the node tests' pods tolerate and select it.
NODE_TAINT_KEY = "paged.dev/real-node"
CNI_NETWORK = "paged-testbed"


@dataclass(frozen=True)
class NodePaths:
    """Where the node's state lives. ``containerd_root`` persists across sessions (imported images are kept);
    everything else is per session."""

    workdir: Path
    containerd_root: Path

    @property
    def containerd_state(self) -> Path:
        return self.workdir / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.workdir / "containerd.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.workdir / "cni"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.workdir / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.workdir / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.workdir / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        return self.workdir / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.workdir / "Corefile"


def containerd_config(paths: NodePaths, runc: str, cni_bin_dir: str) -> str:
    """containerd 1.6's config (version 2) for the CRI plugin, with every path under the test bed's own folders."""
    return f"""version = 2
root = {json.dumps(str(paths.containerd_root))}
state = {json.dumps(str(paths.containerd_state))}
# Plugins this node does not use; their start-up only adds noise to the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = {json.dumps(str(paths.containerd_socket))}

[plugins."io.containerd.internal.v1.opt"]
  path = {json.dumps(str(paths.workdir / "containerd-opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {json.dumps(PAUSE_IMAGE)}
  # The VM forbids lowering oom_score_adj; without this runc fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Pod network namespaces under the state folder, not /run/netns: they stay inside the node's mount namespace.
  netns_mounts_under_state_dir = true
  # The streaming server (exec, attach) listens inside the node's network namespace only.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {json.dumps(cni_bin_dir)}
    conf_dir = {json.dumps(str(paths.cni_conf_dir))}
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = {json.dumps(runc)}
        # The kubelet's cgroupDriver is cgroupfs (no systemd here); the two must agree.
        SystemdCgroup = false
"""


def cni_config(addrs: NodeAddresses, paths: NodePaths) -> dict[str, Any]:
    """One bridge network with host-local addresses from the pod range. No ipMasq: pod traffic never leaves the
    node's namespace, so there is nothing to masquerade for; hairpin mode lets a pod reach itself through a Service."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": addrs.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": addrs.pod_cidr, "gateway": addrs.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.cni_ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(addrs: NodeAddresses, paths: NodePaths, *, cluster_dns: str | None) -> dict[str, Any]:
    """The KubeletConfiguration for this VM (see docs/testbed.md for each setting)."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The VM has cgroup v1 controllers (a hybrid layout); 1.36 refuses v1 unless told not to.
        "failCgroupV1": False,
        # No systemd manages cgroups here.
        "cgroupDriver": "cgroupfs",
        # Per-QoS cgroups and node-allocatable enforcement need cgroup writes the hybrid layout does not support.
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": addrs.node_ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        # The kubelet's API is reachable only from this machine (the node's namespace and the host); the API
        # server, the one client that calls it (logs, exec), holds no client certificate here.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(paths.pod_logs),
        "clusterDomain": "cluster.local",
        "registerWithTaints": [{"key": NODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        # The shared disk runs with little free space: the default disk eviction thresholds (nodefs/imagefs
        # available < 10-15 %) would taint the node, and image GC (at 85 % used) would delete the imported images.
        # Setting evictionHard replaces all its defaults, so only the memory threshold remains.
        "evictionHard": {"memory.available": "100Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # Status and probes at the usual cadence; a faster node-status loop only adds API writes.
        "serializeImagePulls": False,
        "maxPods": 32,
    }
    if cluster_dns:
        config["clusterDNS"] = [cluster_dns]
    return config


def kube_proxy_config(addrs: NodeAddresses, kubeconfig: Path, node_name: str) -> dict[str, Any]:
    """iptables mode inside the node's namespace, with no attempt at the host-wide conntrack table."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": addrs.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": addrs.pod_cidr,
        # nf_conntrack_max is global and read-only here: maxPerCore 0 leaves it alone (kube-proxy otherwise exits).
        # The TCP timeouts are per namespace but equally none of the test bed's business.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig: Path, listen: str) -> str:
    """CoreDNS serving cluster.local from the API server (Services, pods) and refusing everything else: the test
    bed has no upstream resolver to forward to."""
    return f""".:53 {{
    bind {listen}
    errors
    health 127.0.0.1:8091
    ready 127.0.0.1:8191
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
}}
"""


def dump_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)
