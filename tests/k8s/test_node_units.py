"""The real node's pure parts: its addresses and link commands, the configuration files it renders, and the pause
image archive. No root, no processes."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from e2e.cluster.controlplane import KUBERNETES_SERVICE_IP, SERVICE_CIDR, ControlPlaneConfig
from e2e.cluster.nodeconfig import (
    NODE_TAINT_KEY,
    PAUSE_IMAGE,
    NodePaths,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
)
from e2e.cluster.nodenet import NodeAddresses, host_commands, namespace_commands, processes_in_netns, reap_previous
from e2e.cluster.oci import single_binary_image


@pytest.fixture
def paths(tmp_path: Path) -> NodePaths:
    return NodePaths(tmp_path / "node", containerd_root=tmp_path / "containerd")


def test_node_addresses_are_distinct_and_outside_loopback():
    addrs = NodeAddresses()
    link = ipaddress.ip_network(addrs.link_cidr)
    assert {addrs.host_ip, addrs.node_ip} <= {str(a) for a in link.hosts()}
    assert addrs.host_ip != addrs.node_ip
    assert not ipaddress.ip_address(addrs.node_ip).is_loopback
    assert ipaddress.ip_address(addrs.pod_gateway) in ipaddress.ip_network(addrs.pod_cidr)
    assert addrs.service_cidr == SERVICE_CIDR


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pod_cidr": SERVICE_CIDR}, "overlap"),
        ({"link_cidr": "10.250.0.0/31"}, "two addresses"),
        ({"bridge": "a-very-long-bridge-name"}, "15 characters"),
    ],
)
def test_node_addresses_refuse_bad_ranges(kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        NodeAddresses(**kwargs)


def test_host_gains_only_routes_into_the_node_namespace():
    addrs = NodeAddresses()
    routes = [argv for argv in host_commands(addrs, holder_pid=1234) if argv[:3] == ["ip", "route", "add"]]
    assert {argv[3] for argv in routes} == {addrs.pod_cidr, addrs.service_cidr}
    assert all(argv[4:6] == ["via", addrs.node_ip] and argv[-1] == addrs.host_link for argv in routes)
    link = next(argv for argv in host_commands(addrs, 1234) if argv[:3] == ["ip", "link", "add"])
    assert link[-2:] == ["netns", "1234"], "the node's end of the veth goes into the holder's namespace"


def test_node_namespace_gets_no_default_route():
    commands = namespace_commands(NodeAddresses())
    assert not [argv for argv in commands if argv[:2] == ["ip", "route"]]
    assert ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"] in commands


def test_containerd_config_is_valid_toml_for_this_vm(paths: NodePaths):
    config = tomllib.loads(containerd_config(paths, "/usr/sbin/runc", "/usr/lib/cni"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["cni"]["conf_dir"] == str(paths.cni_conf_dir)
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}
    assert config["grpc"]["address"] == str(paths.containerd_socket)
    assert config["root"] == str(paths.containerd_root)


def test_cni_config_is_one_bridge_in_the_pod_range_without_masquerade(paths: NodePaths):
    addrs = NodeAddresses()
    config = cni_config(addrs, paths)
    bridge = config["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == addrs.bridge
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": addrs.pod_cidr, "gateway": addrs.pod_gateway}]]
    assert bridge["ipam"]["dataDir"] == str(paths.cni_ipam_dir)


def test_kubelet_config_carries_what_this_vm_needs(paths: NodePaths):
    config = kubelet_config(NodeAddresses(), paths, cluster_dns="10.250.0.2")
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupsPerQOS"] is False
    assert config["enforceNodeAllocatable"] == []
    assert config["failSwapOn"] is False
    assert config["evictionHard"] == {"memory.available": "100Mi"}
    assert config["registerWithTaints"] == [{"key": NODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert config["clusterDNS"] == ["10.250.0.2"]
    assert yaml.safe_load(yaml.safe_dump(config)) == config
    assert "clusterDNS" not in kubelet_config(NodeAddresses(), paths, cluster_dns=None)


def test_kube_proxy_leaves_the_global_conntrack_table_alone(tmp_path: Path):
    config = kube_proxy_config(NodeAddresses(), tmp_path / "kc", "paged-node")
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["mode"] == "iptables"
    assert config["hostnameOverride"] == "paged-node"


def test_pause_archive_is_a_valid_oci_layout(tmp_path: Path):
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    archive = single_binary_image(binary, PAUSE_IMAGE, tmp_path / "pause.tar")
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]

    def blob(descriptor: dict) -> bytes:
        data = files[f"blobs/sha256/{descriptor['digest'].removeprefix('sha256:')}"]
        assert hashlib.sha256(data).hexdigest() == descriptor["digest"].removeprefix("sha256:")
        assert len(data) == descriptor["size"]
        return data

    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == PAUSE_IMAGE
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/pause"]
    (layer,) = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    with tarfile.open(fileobj=io.BytesIO(blob(layer))) as tar:
        member = tar.getmember("pause")
        assert member.mode == 0o755 and tar.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_control_plane_address_must_be_ipv4():
    with pytest.raises(ValueError, match="address"):
        ControlPlaneConfig(address="localhost")
    assert ControlPlaneConfig().loopback and not ControlPlaneConfig(address="10.250.0.1").loopback
    assert KUBERNETES_SERVICE_IP == "10.96.0.1"


def test_processes_are_found_by_network_namespace():
    child = subprocess.Popen(["sleep", "30"])
    try:
        ours = os.stat("/proc/self/ns/net").st_ino
        found = processes_in_netns(ours)
        assert child.pid in found and os.getpid() not in found
        assert processes_in_netns(1) == []  # no namespace has inode 1
    finally:
        child.kill()
        child.wait()


def test_reaping_without_a_record_kills_nothing(tmp_path: Path):
    addrs = NodeAddresses(host_link="paged-unit0")  # never the live node's link
    assert reap_previous(tmp_path / "absent", addrs) == []
    (tmp_path / "garbled").write_text("not an inode")
    assert reap_previous(tmp_path / "garbled", addrs) == []
    assert not (tmp_path / "garbled").exists()
