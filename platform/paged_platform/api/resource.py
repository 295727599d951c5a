"""The `ModelDeployment` resource: identity (group, version, names) and the top-level object."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field

from paged_platform.api.base import ApiModel, cel
from paged_platform.api.spec import ModelDeploymentSpec
from paged_platform.api.status import ModelDeploymentStatus

GROUP = "paged.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ModelDeployment"
PLURAL = "modeldeployments"
SINGULAR = "modeldeployment"
SHORT_NAMES = ("md",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# The name also names the child Service, so it must be a DNS-1035 label.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 63
_NAME_RE = re.compile(NAME_PATTERN)


class ObjectMeta(ApiModel):
    """The parts of `metadata` paged reads; everything else the server adds is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None


class ModelDeployment(ApiModel):
    """A model served by engine replicas that the paged operator deploys, scales and tunes."""

    api_version: Literal["paged.dev/v1alpha1"] = API_VERSION
    kind: Literal["ModelDeployment"] = KIND
    metadata: ObjectMeta
    spec: ModelDeploymentSpec = Field(default_factory=ModelDeploymentSpec)
    status: ModelDeploymentStatus = Field(default_factory=ModelDeploymentStatus)

    @cel(
        f"size(self.metadata.name) <= {NAME_MAX_LENGTH} && self.metadata.name.matches('{NAME_PATTERN}')",
        "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter,"
        f" at most {NAME_MAX_LENGTH} characters): it also names the model's Service",
    )
    def _name_is_dns_label(self) -> bool:
        return len(self.metadata.name) <= NAME_MAX_LENGTH and _NAME_RE.match(self.metadata.name) is not None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> ModelDeployment:
        """Parse an object as the API server returns it."""
        return cls.model_validate(obj)
