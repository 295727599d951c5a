#!/usr/bin/env bash
# Builds the container images from docker/*.Dockerfile and prints each one's size and build time.
#
#   scripts/build_images.sh [--cuda] [--no-model] [--push] [engine|engine-cuda|operator ...]
#
# Default: engine (CPU) and operator; --cuda adds engine-cuda; --no-model leaves the default model (Gemma 3 270M,
# converted at build time) out of the engine images and tags them -nomodel. Names follow the chart and the
# operator's default:
#   engine       $PAGED_REGISTRY/paged-engine:$TAG        (ModelDeployment spec.engine.image's default)
#   engine-cuda  $PAGED_REGISTRY/paged-engine:$TAG-cuda
#   operator     $PAGED_REGISTRY/paged-operator:$TAG      (the chart's image.repository, tag = appVersion)
# with PAGED_REGISTRY=ghcr.io/paged and TAG = the chart's appVersion unless set (PAGED_IMAGE_TAG).
#
# An image whose inputs (its Dockerfile, the files it copies, its build arguments, the base image) hash the same
# as the existing image's is not rebuilt: a second run with no change takes seconds. Layers are cached too, so a
# source change rebuilds only the layers after the source is copied.
#
# Environment:
#   PAGED_BASE_IMAGE       base of every image (default docker.io/library/python:3.11-slim). When the default
#                          cannot be pulled (no registry reachable), a Debian base is built from this machine's
#                          apt sources with mmdebstrap and imported as localhost/paged/debian-base:bookworm.
#   PAGED_TORCH_INDEX_URL  where engine's torch comes from (default PyTorch's CPU wheel index; when unreachable,
#                          the default index's CUDA wheel with its CUDA libraries: a much larger image).
#   PAGED_CUDA_ARCH        GPU architectures of engine-cuda's kernels (default 80,90).
#   PAGED_BUILD_CA_BUNDLE  a PEM bundle for TLS inside the build (build secret; default $PIP_CERT or
#                          $SSL_CERT_FILE when set, for machines behind an intercepting proxy).
#   PAGED_CONTAINER_TOOL   docker, podman or buildah (default: see scripts/container.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
container="$repo/scripts/container.sh"

cuda=0 model=baked push=0 images=()
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    --no-model) model=none ;;
    --push) push=1 ;;
    engine | engine-cuda | operator) images+=("$arg") ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ ${#images[@]} -eq 0 ]; then
  images=(engine operator)
  [ "$cuda" = 1 ] && images+=(engine-cuda)
fi

"$container" --install
tool=$("$container" --which)
registry=${PAGED_REGISTRY:-ghcr.io/paged}
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/paged/Chart.yaml)
tag=${PAGED_IMAGE_TAG:-$version}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- docker engine operator platform csrc pyproject.toml setup.py 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
ca_bundle=${PAGED_BUILD_CA_BUNDLE:-${PIP_CERT:-${SSL_CERT_FILE:-}}}

label() {  # label IMAGE KEY: the image's label, empty when the image or the label is absent
  if [ "$tool" = buildah ]; then
    buildah inspect --type image --format "{{ index .OCIv1.Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
  else
    "$container" image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
  fi
}

image_id() {
  if [ "$tool" = buildah ]; then buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null
  else "$container" image inspect --format '{{.Id}}' "$1" 2>/dev/null; fi
}

size_mb() {
  local bytes
  if [ "$tool" = buildah ]; then
    bytes=$(buildah images --json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["size"])')
  else
    bytes=$("$container" image inspect --format '{{.Size}}' "$1")
  fi
  echo $((bytes / 1000 / 1000))
}

# The sha256 over the named files' paths and contents (build outputs and caches excluded), and extra strings.
inputs_hash() {
  local files=() strings=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift && strings=("$@")
  {
    find "${files[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.so' -print0 \
      | sort -z | xargs -0 sha256sum
    printf '%s\n' "${strings[@]}"
  } | sha256sum | cut -c1-16
}

# The Debian base for machines that reach no container registry: this machine's apt sources, python3.
debian_base() {
  local name=localhost/paged/debian-base:bookworm sources=http://deb.debian.org/debian packages=python3,python3-venv,ca-certificates
  if grep -qs '^ID=debian' /etc/os-release && [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sources=/etc/apt/sources.list.d/debian.sources
  elif grep -qs '^ID=debian' /etc/os-release && [ -f /etc/apt/sources.list ]; then
    sources=/etc/apt/sources.list
  fi
  local hash
  hash=$( { cat "$sources" 2>/dev/null || echo "$sources"; echo "$packages"; } | sha256sum | cut -c1-16)
  if [ "$(label "$name" dev.paged.build.inputs)" = "$hash" ]; then
    echo "$name"; return
  fi
  command -v mmdebstrap >/dev/null || { echo "mmdebstrap is needed to build a local base image" >&2; return 1; }
  echo "[images] no registry reachable: building $name from Debian packages ($sources)" >&2
  local start=$SECONDS tar
  tar=$(mktemp --suffix=.tar)
  nice -n 10 mmdebstrap --quiet --variant=minbase --include="$packages" \
    --aptopt='Apt::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tar" "$sources" >&2
  if [ "$tool" = buildah ]; then
    # buildah has no import: a one-layer image from the tarball.
    local ctr
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$tar" / >/dev/null
    buildah config --env LANG=C.UTF-8 --cmd python3 --label "dev.paged.build.inputs=$hash" "$ctr"
    buildah commit --rm "$ctr" "$name" >/dev/null
  else
    "$container" import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
      --change "LABEL dev.paged.build.inputs=$hash" "$tar" "$name" >/dev/null
  fi
  rm -f "$tar"
  echo "[images] $name: $(size_mb "$name") MB in $((SECONDS - start)) s" >&2
  echo "$name"
}

base=${PAGED_BASE_IMAGE:-docker.io/library/python:3.11-slim}
if [ -z "$(image_id "$base")" ] && ! timeout 120 "$container" pull -q "$base" >/dev/null 2>&1; then
  if [ -n "${PAGED_BASE_IMAGE:-}" ]; then
    echo "cannot pull PAGED_BASE_IMAGE=$base" >&2; exit 1
  fi
  base=$(debian_base)
fi
base_id=$(image_id "$base")

torch_index=${PAGED_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
if [[ " ${images[*]} " == *" engine "* ]] && [ -n "$torch_index" ] && ! timeout 20 python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)" "$torch_index/torch/" >/dev/null 2>&1; then
  echo "[images] $torch_index is unreachable: engine gets the default index's torch (CUDA libraries included)" >&2
  torch_index=""
fi

build() {  # build NAME DOCKERFILE IMAGE [BUILD-ARG...] -- INPUT-FILE...
  local name=$1 dockerfile=$2 image=$3 args=() files=()
  shift 3
  while [ "$1" != -- ]; do args+=(--build-arg "$1"); shift; done
  shift
  files=("$dockerfile" "$@")
  local hash
  hash=$(inputs_hash "${files[@]}" -- "$base_id" "$version" "${args[@]}")
  local start=$SECONDS
  if [ "$(label "$image" dev.paged.build.inputs)" = "$hash" ]; then
    echo "[images] $name: $image is up to date (inputs $hash)"
  else
    local secret=()
    [ -n "$ca_bundle" ] && [ -f "$ca_bundle" ] && secret=(--secret "id=ca-bundle,src=$ca_bundle")
    echo "[images] $name: building $image (inputs $hash)"
    local previous
    previous=$(image_id "$image" || true)
    nice -n 10 "$container" build --network host -f "$dockerfile" -t "$image" "${secret[@]}" \
      --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
      "${args[@]}" --label "dev.paged.build.inputs=$hash" . 2>&1 | sed -u "s/^/[$name] /"
    # The image this one replaces is untagged now; an engine image is ~5 GB, so each rebuild would otherwise
    # leave one behind (the build stages' cached layers stay: they are what makes the next build fast).
    if [ -n "$previous" ] && [ "$previous" != "$(image_id "$image")" ]; then
      "$container" rmi "$previous" >/dev/null 2>&1 || true
    fi
  fi
  printf '[images] %-12s %-48s %6s MB  %4s s\n' "$name" "$image" "$(size_mb "$image")" "$((SECONDS - start))"
  if [ "$push" = 1 ]; then "$container" push "$image"; fi
}

engine_inputs=(docker/install_torch.sh docker/requirements.py docker/bake_default_model.py docker/prune_cuda_libs.py
  pyproject.toml setup.py README.md csrc engine operator platform)
operator_inputs=(docker/requirements.py pyproject.toml setup.py README.md engine operator platform)
suffix=""
[ "$model" = none ] && suffix=-nomodel
for image in "${images[@]}"; do
  case "$image" in
    engine)
      build engine docker/engine-cpu.Dockerfile "$registry/paged-engine:$tag$suffix" \
        "TORCH_INDEX_URL=$torch_index" "DEFAULT_MODEL=$model" -- "${engine_inputs[@]}" ;;
    engine-cuda)
      build engine-cuda docker/engine-cuda.Dockerfile "$registry/paged-engine:$tag-cuda$suffix" \
        "PAGED_CUDA_ARCH=${PAGED_CUDA_ARCH:-80,90}" "DEFAULT_MODEL=$model" -- "${engine_inputs[@]}" ;;
    operator)
      build operator docker/operator.Dockerfile "$registry/paged-operator:$tag" -- "${operator_inputs[@]}" ;;
  esac
done
