# syntax=docker/dockerfile:1
# The paged operator: kopf with paged_operator and paged_platform, and no torch.
#
# Build from the repository root (scripts/build_images.sh does this and picks the arguments):
#   docker build -f docker/operator.Dockerfile -t ghcr.io/paged/paged-operator:0.1.0 .
#
# Runtime contract: runs as 65532:65532 with a read-only root filesystem; kopf writes nothing but /tmp, which the
# chart mounts as an emptyDir.

# Any Debian-based image with python3 (3.11+) and python3-venv: python:3.11-slim, or a local one.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv
# An optional build secret `ca-bundle` (a PEM bundle) is used for pip's TLS, for builds behind an intercepting proxy.
COPY docker/requirements.py pyproject.toml /opt/build/
RUN --mount=type=secret,id=ca-bundle \
    export PIP_CERT="$(test -f /run/secrets/ca-bundle && echo /run/secrets/ca-bundle)" \
    && pip install packaging \
    && python /opt/build/requirements.py /opt/build/pyproject.toml --extra operator > /opt/build/requirements.txt \
    && pip install -r /opt/build/requirements.txt "setuptools>=75" wheel
COPY setup.py README.md pyproject.toml /opt/src/
COPY engine /opt/src/engine
COPY operator /opt/src/operator
COPY platform /opt/src/platform
# One distribution holds the three packages; without torch, only paged-operator and paged-ctl are usable here.
RUN pip install --no-build-isolation --no-deps /opt/src \
    && pip uninstall -y wheel >/dev/null \
    && cd / && paged-operator --help >/dev/null && paged-ctl --help >/dev/null

FROM ${BASE_IMAGE} AS runtime
RUN groupadd --gid 65532 paged \
    && useradd --uid 65532 --gid 65532 --home-dir /home/paged --create-home --shell /usr/sbin/nologin paged
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/paged \
    XDG_CACHE_HOME=/tmp/.cache
# Last, so that a new revision changes the metadata only.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/paged/paged
LABEL org.opencontainers.image.title="paged-operator" \
      org.opencontainers.image.description="paged operator: reconciles ModelDeployment (paged.dev/v1alpha1) resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
WORKDIR /home/paged
ENTRYPOINT ["paged-operator"]
CMD ["run", "--standalone", "--all-namespaces"]
