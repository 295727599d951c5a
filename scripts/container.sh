#!/usr/bin/env bash
# Runs this machine's container tool with the flags the machine needs: `scripts/container.sh COMMAND ARGS...`.
#
# The tool: $PAGED_CONTAINER_TOOL, else docker when its daemon answers, else podman, else buildah (which builds
# but cannot run images). `scripts/container.sh --which` prints the choice; `--install` installs podman and
# buildah (and mmdebstrap for a local base image) from Debian packages when none is present (as root).
#
# Podman and buildah on a cgroup v1 or hybrid host run containers with runc (crun refuses the hybrid layout), and
# every `build`/`run`/`create` gets explicit rlimits within the caller's hard limits: their defaults can exceed a
# host's, and the container then fails to start ("error setting rlimit").
set -euo pipefail

detect() {
  if [ -n "${PAGED_CONTAINER_TOOL:-}" ]; then
    command -v "$PAGED_CONTAINER_TOOL" >/dev/null || { echo "PAGED_CONTAINER_TOOL=$PAGED_CONTAINER_TOOL not found" >&2; return 1; }
    echo "$PAGED_CONTAINER_TOOL"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo docker
  elif command -v podman >/dev/null; then
    echo podman
  elif command -v buildah >/dev/null; then
    echo buildah
  else
    echo "no container tool: install docker, podman or buildah (scripts/container.sh --install as root)" >&2
    return 1
  fi
}

install_tools() {
  local packages=(podman buildah runc mmdebstrap uidmap fuse-overlayfs slirp4netns netavark aardvark-dns
    containernetworking-plugins iptables ca-certificates)
  if detect >/dev/null 2>&1; then
    command -v mmdebstrap >/dev/null && return 0
    packages=(mmdebstrap)  # only needed for a local base image, where no registry is reachable
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    [ "${packages[*]}" = mmdebstrap ] && return 0
    echo "install podman (or docker) yourself; automatic install needs root and apt-get" >&2
    return 1
  fi
  echo "[container] installing ${packages[*]} from Debian packages" >&2
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}" >&2
}

# Flags for build/run/create on podman and buildah: runc on cgroup v1/hybrid hosts, rlimits within ours.
extra_flags() {
  local flags=()
  if [ ! -f /sys/fs/cgroup/cgroup.controllers ] && command -v runc >/dev/null; then
    flags+=(--runtime "$(command -v runc)")
  fi
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] || [ "$nofile" -gt 16384 ] && nofile=16384
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 16384 ] && nproc=16384
  flags+=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  printf '%s\n' "${flags[@]}"
}

case "${1:-}" in
  --which) detect; exit ;;
  --install) install_tools; exit ;;
  "") echo "usage: scripts/container.sh --which | --install | COMMAND ARGS..." >&2; exit 2 ;;
esac

tool=$(detect)
command=$1
shift
if [ "$tool" = docker ]; then exec docker "$command" "$@"; fi
case "$command" in
  build | run | create)
    [ "$tool" = buildah ] && [ "$command" != build ] && { echo "buildah cannot '$command' images; install podman" >&2; exit 1; }
    mapfile -t flags < <(extra_flags)
    exec "$tool" "$command" "${flags[@]}" "$@"
    ;;
  *) exec "$tool" "$command" "$@" ;;
esac
