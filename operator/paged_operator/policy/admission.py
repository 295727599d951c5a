"""Pure: what a ModelDeployment may ask of the cluster through the operator, which creates its pods under the
operator's own cluster-wide identity.

Without this, anyone who may create a ModelDeployment would run pods as any ServiceAccount of the namespace, mount
a hostPath, or run any image, with only the namespace's Pod Security admission in the way. The chart's
``policy.allowed*`` values (the operator's ``--allowed-*`` flags) widen what is allowed; by default:

* ServiceAccounts: the namespace's ``default`` (what an unset ``pod.serviceAccountName`` runs as) and no other;
* volume types in ``pod.volumes``: those Pod Security's ``restricted`` level allows (no ``hostPath``, no
  network file systems mounted by the node);
* images (the engine, the router, model and adapter images): the operator's own (``--engine-image``,
  ``--router-image``, and this release's), and no other.

Invariants: what the operator renders itself is always allowed; each refusal names the field, the value, and the
chart value that would allow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from paged_platform.api import ImageModel, ModelDeployment

from paged_operator.render.settings import Images

DEFAULT_SERVICE_ACCOUNT = "default"
#: The volume types Pod Security's ``restricted`` standard allows.
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


@dataclass(frozen=True)
class AdmissionPolicy:
    """What the chart allows beyond the defaults: ServiceAccount names, volume types, image patterns (``*``, ``?``
    as in shell globs, matched against the whole reference: ``registry.example.com/models/*``)."""

    service_accounts: frozenset[str] = frozenset()
    volume_types: frozenset[str] = frozenset()
    images: tuple[str, ...] = ()

    def allows_image(self, reference: str, own: frozenset[str]) -> bool:
        """``own``: the operator's images (``Images.own``), always allowed."""
        return reference in own or any(fnmatchcase(reference, pattern) for pattern in self.images)


def _listed(values: frozenset[str] | tuple[str, ...]) -> str:
    return ", ".join(sorted(values)) if values else "none"


def _images(md: ModelDeployment, images: Images) -> list[tuple[str, str]]:
    """(field, reference) of every image the spec names or, unset, the operator renders."""
    spec = md.spec
    named = [("spec.engine.image", images.engine_image(md))]
    if spec.router.enabled:
        named.append(("spec.router.image", images.router_image(md)))
    model = spec.model.resolved()
    if isinstance(model, ImageModel):
        named.append(("spec.model.image.reference", model.reference))
    for i, adapter in enumerate(spec.adapters):
        source = adapter.source.given()
        if isinstance(source, ImageModel):
            named.append((f"spec.adapters[{i}].source.image.reference", source.reference))
    return named


def violations(md: ModelDeployment, policy: AdmissionPolicy, images: Images) -> list[str]:
    """Why the operator must not create ``md``'s pods (empty: nothing); ``images``: the operator's."""
    out: list[str] = []
    account = md.spec.pod.service_account_name
    if account not in (None, DEFAULT_SERVICE_ACCOUNT) and account not in policy.service_accounts:
        out.append(
            f"spec.pod.serviceAccountName {account!r} is not allowed: engines run as the namespace's default "
            f"ServiceAccount or one in the chart's policy.allowedServiceAccounts (now: "
            f"{_listed(policy.service_accounts)})"
        )
    allowed_types = RESTRICTED_VOLUME_TYPES | policy.volume_types
    for i, volume in enumerate(md.spec.pod.volumes):
        kinds = [key for key in volume.to_wire() if key != "name"]
        for kind in kinds:
            if kind not in allowed_types:
                out.append(
                    f"spec.pod.volumes[{i}] ({volume.to_wire().get('name')!r}) is a {kind} volume, which is not "
                    f"allowed: add {kind} to the chart's policy.allowedVolumeTypes (beyond Pod Security's "
                    f"restricted types, now: {_listed(policy.volume_types)})"
                )
    own = images.own()
    for field, reference in _images(md, images):
        if not policy.allows_image(reference, own):
            out.append(
                f"{field} {reference!r} is not allowed: images are this operator release's own or match the "
                f"chart's policy.allowedImages (now: {_listed(policy.images)})"
            )
    return out
