"""Pure: how a ModelDeployment's LoRA adapters (``spec.adapters``) reach its engine pods.

Each adapter is rendered like a model source (``model_mounts``), under names of its own so it never meets the
model's volumes:

* ``path``: its claim mounted read-only at ``/adapters/<i>``; ``image``: an image volume there.
* ``huggingFace``, ``s3``: an init container ``adapter-download-<i>`` runs ``paged-engine download`` into the
  ``adapter-cache`` emptyDir (adapters are small; each pod fetches its own), which the engine mounts read-only.

The engine gets ``--lora-modules NAME=DIR ...`` (and ``--max-loras`` when there are more adapters than its
default slots, ``--max-lora-rank`` from ``spec.engine.maxLoraRank``), so every replica serves every adapter from
start-up. ``i`` is the adapter's index in ``spec.adapters``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paged_platform.api import ImageModel, ModelDeployment, PathModel
from paged_platform.engine_contract.launch import DEFAULT_MAX_LORAS, ServeFlag

from paged_operator.render.model_mounts import DownloadStep, download_dir, download_step, inside

ADAPTER_MOUNT = "/adapters"
ADAPTER_CACHE_VOLUME = "adapter-cache"
ADAPTER_CACHE_MOUNT = "/adapter-cache"


def adapter_volume(index: int) -> str:
    return f"adapter-{index}"


def download_container_name(index: int) -> str:
    return f"adapter-download-{index}"


@dataclass(frozen=True)
class AdapterMounts:
    """Volumes, engine mounts and arguments, and named download steps for all of a deployment's adapters."""

    args: list[str] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    engine_mounts: list[dict[str, Any]] = field(default_factory=list)
    downloads: list[tuple[str, DownloadStep]] = field(default_factory=list)


def adapter_mounts(md: ModelDeployment) -> AdapterMounts:
    adapters = md.spec.adapters
    if not adapters:
        return AdapterMounts()
    out = AdapterMounts()
    modules: list[str] = []
    for index, adapter in enumerate(adapters):
        source = adapter.source.given()
        if isinstance(source, PathModel | ImageModel):
            mount_path = inside(ADAPTER_MOUNT, str(index))
            name = adapter_volume(index)
            if isinstance(source, PathModel):
                out.volumes.append({"name": name, "persistentVolumeClaim": {"claimName": source.claim_name,
                                                                             "readOnly": True}})  # fmt: skip
            else:
                out.volumes.append({"name": name, "image": {"reference": source.reference,
                                                            "pullPolicy": source.pull_policy}})  # fmt: skip
            out.engine_mounts.append({"name": name, "mountPath": mount_path, "readOnly": True})
            modules.append(f"{adapter.name}={inside(mount_path, source.path)}")
        else:
            dest = download_dir(source, ADAPTER_CACHE_MOUNT)
            step = download_step(source, dest, ADAPTER_CACHE_VOLUME, ADAPTER_CACHE_MOUNT)
            out.downloads.append((download_container_name(index), step))
            modules.append(f"{adapter.name}={dest}")
    if out.downloads:
        out.volumes.append({"name": ADAPTER_CACHE_VOLUME, "emptyDir": {}})
        out.engine_mounts.append({"name": ADAPTER_CACHE_VOLUME, "mountPath": ADAPTER_CACHE_MOUNT, "readOnly": True})
    out.args.extend([ServeFlag.LORA_MODULES, *modules, ServeFlag.MAX_LORA_RANK, str(md.spec.engine.max_lora_rank)])
    if len(adapters) > DEFAULT_MAX_LORAS:
        out.args.extend([ServeFlag.MAX_LORAS, str(len(adapters))])
    return out
