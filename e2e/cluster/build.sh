#!/usr/bin/env bash
# Builds the local Kubernetes testbed's binaries from Go modules at the versions pinned in versions.env:
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok, helm and promtool; for the real node, kubelet,
# kube-proxy, kubectl, CoreDNS and a pause binary (components kubernetes-node, coredns and pause, built only when
# asked for).
#
# Each component lands in its own version-keyed folder under $PAGED_K8S_CACHE (default ~/.cache/paged/k8s),
# e.g. ~/.cache/paged/k8s/kubernetes-v1.36.3/kube-apiserver. A component whose binaries are already there is
# not rebuilt, so a second run builds nothing. Progress goes to stderr; stdout gets one `name=path` line per
# binary, which the pytest fixtures read.
#
# Usage: e2e/cluster/build.sh [component ...]
#   (components: kubernetes kubernetes-node coredns pause etcd kwok helm promtool; default: the control plane's five)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache="${PAGED_K8S_CACHE:-${PAGED_CACHE:-$HOME/.cache/paged}/k8s}"
mkdir -p "$cache"

# Dependencies' go.mod files carry replace directives for their own monorepos; building from a wrapper module
# with -mod=mod and no workspace ignores them. GOTOOLCHAIN=local: no toolchain downloads, the proxy serves modules.
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
# Go's official tarball installs to /usr/local/go, whose bin only interactive shells tend to put on PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "[k8s-build] Go is not installed (need go >= 1.26)" >&2; exit 1; }

log() { echo "[k8s-build] $*" >&2; }

# recipe COMPONENT : a digest of how the component is built (its build function's text, the global Go settings),
# so editing a recipe rebuilds that component even though its version did not change.
recipe() {
  { declare -f "build_${1//-/_}"; echo "$GOFLAGS $CGO_ENABLED $(go env GOVERSION)"; } | sha256sum | cut -c1-16
}

# have COMPONENT DIR BIN... : true when every binary is present and was built by the current recipe.
have() {
  local component="$1" dir="$2" b
  shift 2
  [ "$(cat "$dir/.recipe" 2>/dev/null)" = "$(recipe "$component")" ] || return 1
  for b in "$@"; do [ -e "$dir/$b" ] || return 1; done
}

# wrapper_module DIR : an empty main module to build other modules' commands from.
wrapper_module() {
  (cd "$1" && go mod init paged.dev/testbed-build >/dev/null 2>&1)
}

# fetch DIR PKG@VERSION... : resolve and download into the wrapper module in DIR. go get lists every module it
# adds; that goes to a log shown only on failure, so a build's progress stays readable.
fetch() {
  local dir="$1"
  shift
  if ! (cd "$dir" && go get "$@" >"$dir/go-get.log" 2>&1); then
    log "go get $* failed:"
    tail -n 40 "$dir/go-get.log" >&2
    return 1
  fi
  mkdir -p "$dir/bin"
}

# finish COMPONENT TMPBIN DEST : stamps the recipe and moves freshly built binaries into place in one rename, so a
# half-built folder never looks complete to a concurrent or later run.
finish() {
  local component="$1" tmpbin="$2" dest="$3"
  recipe "$component" >"$tmpbin/.recipe"
  rm -rf "$dest"
  mv "$tmpbin" "$dest"
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION" dest="$cache/kubernetes-$KUBERNETES_VERSION" work
  local bins=(kube-apiserver kube-controller-manager kube-scheduler)
  have kubernetes "$dest" "${bins[@]}" && return 0
  log "building Kubernetes $v (${bins[*]}); cold: tens of minutes on 2 cores"
  work="$(mktemp -d "$cache/.work-kubernetes.XXXXXX")"
  wrapper_module "$work"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging paths, which
  # a dependency cannot use: replace each with its published v0.<minor>.<patch>, read from this release's go.mod.
  local gomod staging staging_version="v0.${v#v1.}" replaces=()
  gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  while read -r staging; do
    replaces+=("-replace=$staging=$staging@$staging_version")
  done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod")
  [ "${#replaces[@]}" -gt 0 ] || { log "no staging replaces found in $gomod"; exit 1; }
  (cd "$work" && go mod edit "${replaces[@]}" -require="k8s.io/kubernetes@$v")
  local pkgs=() b
  for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  local ver_pkg=k8s.io/component-base/version minor="${v#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w -X $ver_pkg.gitVersion=$v -X $ver_pkg.gitMajor=1 -X $ver_pkg.gitMinor=$minor"
  ldflags+=" -X $ver_pkg.gitTreeState=clean -X $ver_pkg.buildDate=1970-01-01T00:00:00Z"
  fetch "$work" "${pkgs[@]/%/@$v}"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o bin/ "${pkgs[@]}")
  finish kubernetes "$work/bin" "$dest"
  rm -rf "$work"
}

# kubernetes_commands WORK VERSION BIN... : build k8s.io/kubernetes/cmd/BIN at VERSION in the wrapper module WORK,
# into WORK/bin. k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging paths,
# which a dependency cannot use: each is replaced with its published v0.<minor>.<patch>, read from the release's go.mod.
kubernetes_commands() {
  local work="$1" v="$2" gomod staging staging_version="v0.${2#v1.}" replaces=() pkgs=() b
  shift 2
  gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  while read -r staging; do
    replaces+=("-replace=$staging=$staging@$staging_version")
  done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod")
  [ "${#replaces[@]}" -gt 0 ] || { log "no staging replaces found in $gomod"; exit 1; }
  (cd "$work" && go mod edit "${replaces[@]}" -require="k8s.io/kubernetes@$v")
  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  local ver_pkg=k8s.io/component-base/version minor="${v#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w -X $ver_pkg.gitVersion=$v -X $ver_pkg.gitMajor=1 -X $ver_pkg.gitMinor=$minor"
  ldflags+=" -X $ver_pkg.gitTreeState=clean -X $ver_pkg.buildDate=1970-01-01T00:00:00Z"
  fetch "$work" "${pkgs[@]/%/@$v}"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o bin/ "${pkgs[@]}")
}

# The real node's Kubernetes binaries, at the control plane's version: kubelet, kube-proxy, and kubectl for the
# tests that run what a user runs. A folder of their own, so the control plane's binaries are not rebuilt.
build_kubernetes_node() {
  local dest="$cache/kubernetes-node-$KUBERNETES_VERSION" work bins=(kubelet kube-proxy kubectl)
  have kubernetes-node "$dest" "${bins[@]}" && return 0
  log "building Kubernetes $KUBERNETES_VERSION node binaries (${bins[*]})"
  work="$(mktemp -d "$cache/.work-kubernetes-node.XXXXXX")"
  wrapper_module "$work"
  kubernetes_commands "$work" "$KUBERNETES_VERSION" "${bins[@]}"
  finish kubernetes-node "$work/bin" "$dest"
  rm -rf "$work"
}

# CoreDNS, the cluster DNS the real node's pods resolve Service names with; run as a test-bed process.
build_coredns() {
  local v="$COREDNS_VERSION" dest="$cache/coredns-$COREDNS_VERSION" work
  have coredns "$dest" coredns && return 0
  log "building CoreDNS $v"
  work="$(mktemp -d "$cache/.work-coredns.XXXXXX")"
  wrapper_module "$work"
  fetch "$work" "github.com/coredns/coredns@$v"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o bin/coredns github.com/coredns/coredns)
  finish coredns "$work/bin" "$dest"
  rm -rf "$work"
}

# The real node's pod sandbox binary (pause/main.go, this repository's own): static, so its image needs no base.
build_pause() {
  local dest="$cache/pause-$(sha256sum "$here/pause/main.go" | cut -c1-12)" work
  have pause "$dest" pause && return 0
  log "building the pause binary"
  work="$(mktemp -d "$cache/.work-pause.XXXXXX")"
  wrapper_module "$work"
  cp "$here/pause/main.go" "$work/"
  mkdir -p "$work/bin"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o bin/pause .)
  finish pause "$work/bin" "$dest"
  rm -rf "$work"
}

build_etcd() {
  local v="$ETCD_VERSION" dest="$cache/etcd-$ETCD_VERSION" work
  have etcd "$dest" etcd && return 0
  log "building etcd $v"
  work="$(mktemp -d "$cache/.work-etcd.XXXXXX")"
  wrapper_module "$work"
  # The server module's root package is the etcd binary; its relative replaces are ignored from a wrapper and
  # its requirements pin api/client/pkg at the same release.
  fetch "$work" "go.etcd.io/etcd/server/v3@$v"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o bin/etcd go.etcd.io/etcd/server/v3)
  finish etcd "$work/bin" "$dest"
  rm -rf "$work"
}

build_kwok() {
  local v="$KWOK_VERSION" dest="$cache/kwok-$KWOK_VERSION" work
  have kwok "$dest" kwok stages.yaml && return 0
  log "building kwok $v"
  work="$(mktemp -d "$cache/.work-kwok.XXXXXX")"
  wrapper_module "$work"
  fetch "$work" "sigs.k8s.io/kwok/cmd/kwok@$v"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$v" \
      -o bin/kwok sigs.k8s.io/kwok/cmd/kwok)
  # The kwok binary simulates nothing without Stage objects; kwokctl embeds its defaults, a bare kwok does not.
  # Take the same release's own stages (node init + lease heartbeat, pod ready/complete/delete) so they match.
  local src f
  src="$(cd "$work" && go mod download -json "sigs.k8s.io/kwok@$v" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"
    cat "$src/kustomize/stage/$f.yaml"
  done >"$work/bin/stages.yaml"
  finish kwok "$work/bin" "$dest"
  rm -rf "$work"
}

build_helm() {
  local v="$HELM_VERSION" dest="$cache/helm-$HELM_VERSION" work major
  have helm "$dest" helm && return 0
  log "building helm $v"
  major="${v%%.*}"
  work="$(mktemp -d "$cache/.work-helm.XXXXXX")"
  wrapper_module "$work"
  fetch "$work" "helm.sh/helm/$major/cmd/helm@$v"
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$v" \
      -o bin/helm "helm.sh/helm/$major/cmd/helm")
  finish helm "$work/bin" "$dest"
  rm -rf "$work"
}

build_promtool() {
  local v="$PROMETHEUS_MODULE_VERSION" dest="$cache/promtool-$PROMETHEUS_MODULE_VERSION" work release
  have promtool "$dest" promtool && return 0
  # v0.316.0 -> 3.16.0
  release="${v#v0.}"
  release="$((${release%%.*} / 100)).$((${release%%.*} % 100)).${release#*.}"
  # remove_all_sd leaves out the cloud service-discovery plugins (AWS, Azure, GCE, ...): rule checks and rule unit
  # tests need none of them, and they are most of promtool's compile time.
  log "building promtool (Prometheus $release, module $v, without cloud service discovery)"
  work="$(mktemp -d "$cache/.work-promtool.XXXXXX")"
  wrapper_module "$work"
  fetch "$work" "github.com/prometheus/prometheus/cmd/promtool@$v"
  (cd "$work" && nice -n 10 go build -trimpath -tags remove_all_sd \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
      -o bin/promtool github.com/prometheus/prometheus/cmd/promtool)
  finish promtool "$work/bin" "$dest"
  rm -rf "$work"
}

# Print `name=path` for every binary of a component.
report() {
  case "$1" in
    kubernetes) local b; for b in kube-apiserver kube-controller-manager kube-scheduler; do
        echo "$b=$cache/kubernetes-$KUBERNETES_VERSION/$b"; done ;;
    kubernetes-node) local b; for b in kubelet kube-proxy kubectl; do
        echo "$b=$cache/kubernetes-node-$KUBERNETES_VERSION/$b"; done ;;
    coredns) echo "coredns=$cache/coredns-$COREDNS_VERSION/coredns" ;;
    pause) echo "pause=$cache/pause-$(sha256sum "$here/pause/main.go" | cut -c1-12)/pause" ;;
    etcd) echo "etcd=$cache/etcd-$ETCD_VERSION/etcd" ;;
    kwok) echo "kwok=$cache/kwok-$KWOK_VERSION/kwok"; echo "kwok-stages=$cache/kwok-$KWOK_VERSION/stages.yaml" ;;
    helm) echo "helm=$cache/helm-$HELM_VERSION/helm" ;;
    promtool) echo "promtool=$cache/promtool-$PROMETHEUS_MODULE_VERSION/promtool" ;;
  esac
}

components=("$@")
[ "${#components[@]}" -gt 0 ] || components=(kubernetes etcd kwok helm promtool)
for c in "${components[@]}"; do
  case "$c" in
    kubernetes | kubernetes-node | coredns | pause | etcd | kwok | helm | promtool) ;;
    *) echo "unknown component '$c' (choose from: kubernetes kubernetes-node coredns pause etcd kwok helm promtool)" >&2
      exit 2 ;;
  esac
done

# One build at a time per cache: concurrent pytest sessions wait here instead of building twice.
exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "another build holds $cache/.lock; waiting for it"
  flock 9
fi
rm -rf "$cache"/.work-*
for c in "${components[@]}"; do
  start=$SECONDS
  "build_${c//-/_}"
  [ $((SECONDS - start)) -lt 2 ] || log "$c built in $((SECONDS - start)) s"
  report "$c"
done
