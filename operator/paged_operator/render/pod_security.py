"""Pure: the security settings every pod the operator renders runs with, and the writable folders they need.

The defaults pass the ``restricted`` Pod Security Standard: a non-root user (the images' 65532), no privilege
escalation, every capability dropped, the RuntimeDefault seccomp profile, and a read-only root filesystem.
What the engine writes goes to emptyDirs: ``/tmp`` (the engine's IPC sockets), ``/var/cache/paged`` (kernel
builds, library caches: the images point ``PAGED_CACHE``, ``XDG_CACHE_HOME`` and ``HF_HOME`` there) and
``/dev/shm`` (memory-backed, sized, for the tokenizer's and torch's shared memory).
"""

from __future__ import annotations

from typing import Any

#: The user and group of the paged images (docker/*.Dockerfile).
IMAGE_UID = 65532
TMP_VOLUME, CACHE_VOLUME, SHM_VOLUME = "tmp", "cache", "dshm"
CACHE_DIR = "/var/cache/paged"


def pod_security_context() -> dict[str, Any]:
    """``fsGroup`` makes mounted claims writable by the pod's group (the download cache)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "fsGroup": IMAGE_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def writable_volumes(shm_size: str) -> list[dict[str, Any]]:
    return [
        {"name": TMP_VOLUME, "emptyDir": {}},
        {"name": CACHE_VOLUME, "emptyDir": {}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
    ]


def writable_mounts(shm: bool = True) -> list[dict[str, Any]]:
    mounts = [{"name": TMP_VOLUME, "mountPath": "/tmp"}, {"name": CACHE_VOLUME, "mountPath": CACHE_DIR}]
    if shm:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return mounts
