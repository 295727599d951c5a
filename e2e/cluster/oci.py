"""A one-file OCI image archive, written directly: the real node's pause image is one static binary, so it needs no
base image, no registry and no image builder."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any


def _tar_bytes(entries: dict[str, tuple[bytes, int]]) -> bytes:
    """A deterministic tar (fixed mtimes and owners) of ``path: (content, mode)``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(data).hexdigest()}", "size": len(data)}


def single_binary_image(binary: Path, ref: str, out: Path, user: str = "65535:65535") -> Path:
    """Write an OCI image layout archive of ``binary`` as ``/<name>``, its entrypoint, named ``ref`` (the
    ``io.containerd.image.name`` annotation that ``ctr images import`` names the image by)."""
    name = binary.name
    layer = _tar_bytes({name: (binary.read_bytes(), 0o755)})
    layer_desc = _descriptor("application/vnd.oci.image.layer.v1.tar", layer)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [f"/{name}"], "User": user},
            "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
        },
        sort_keys=True,
    ).encode()
    config_desc = _descriptor("application/vnd.oci.image.config.v1+json", config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        },
        sort_keys=True,
    ).encode()
    manifest_desc = _descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
    manifest_desc["annotations"] = {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}
    index = json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}, sort_keys=True).encode()
    blobs = {f"blobs/sha256/{d['digest'].removeprefix('sha256:')}": (b, 0o644) for d, b in
             ((layer_desc, layer), (config_desc, config), (manifest_desc, manifest))}  # fmt: skip
    out.write_bytes(
        _tar_bytes({"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644), "index.json": (index, 0o644), **blobs})
    )
    return out
