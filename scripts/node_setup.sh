#!/usr/bin/env bash
# Installs what the test bed's real node runs on, from Debian packages: containerd (with ctr), runc, the CNI plugins,
# iptables (kube-proxy's and the kubelet's rules) and iproute2 / util-linux (the node's namespaces and link).
# A no-op when all are present; the node fixtures call it before starting the node. Needs root and apt-get.
set -euo pipefail

missing=()
for pair in containerd:containerd ctr:containerd runc:runc iptables:iptables ip:iproute2 nsenter:util-linux \
  unshare:util-linux; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing+=(containernetworking-plugins)
[ ${#missing[@]} -eq 0 ] && exit 0

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "the real node needs: ${missing[*]} (install them as root; this script uses apt-get)" >&2
  exit 1
fi
echo "[node-setup] installing ${missing[*]} from Debian packages" >&2
apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
