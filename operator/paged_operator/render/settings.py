"""What rendering takes from the operator's configuration rather than from the ModelDeployment.

* ``Images``: what an unset ``spec.engine.image`` / ``spec.router.image`` means: the operator's ``--engine-image``
  and ``--router-image`` (the chart's ``images`` values), by default this release's. Resolved each time the operator
  renders and never written into the object, so an operator started with new images (an upgrade, a mirror
  registry) renders new pod templates and the Deployments roll; an image the spec names stays.
* ``NetworkPeers``: who besides a ModelDeployment's router may reach its engines when ``spec.networkPolicy`` is on:
  the operator's own pods (its namespace, ``$POD_NAMESPACE``, and ``--operator-pod-label``) and Prometheus
  (``--prometheus-namespace-label``, ``--prometheus-pod-label``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from paged_platform.api import ModelDeployment
from paged_platform.api.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE, RESOURCE_NAME_PATTERN

#: The label the API server sets on every namespace to its name (Kubernetes 1.21+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Images:
    """The images an unset spec field means."""

    engine: str = DEFAULT_ENGINE_IMAGE
    router: str = DEFAULT_ROUTER_IMAGE

    def engine_image(self, md: ModelDeployment) -> str:
        return md.spec.engine.image or self.engine

    def router_image(self, md: ModelDeployment) -> str:
        return md.spec.router.image or self.router

    def own(self) -> frozenset[str]:
        """The images a ModelDeployment may always name: the configured ones and this release's."""
        return frozenset({self.engine, self.router, DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE})


#: This release's images: what the builders render where no operator configuration is passed.
RELEASE_IMAGES = Images()


def _selector(labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """A label selector; no labels select everything (``{}``, as the API server stores it, so drift repair finds the
    live object equal to the rendered one)."""
    return {"matchLabels": dict(labels)} if labels else {}


@dataclass(frozen=True)
class Peer:
    """Pods with ``pod_labels`` in namespaces with ``namespace_labels`` (no labels: every pod, every namespace)."""

    namespace_labels: Mapping[str, str]
    pod_labels: Mapping[str, str]

    def to_wire(self) -> dict[str, dict[str, dict[str, str]]]:
        """A NetworkPolicyPeer."""
        return {"namespaceSelector": _selector(self.namespace_labels), "podSelector": _selector(self.pod_labels)}


def operator_peer(namespace: str | None, pod_labels: Mapping[str, str]) -> Peer | None:
    """The operator's pods; None without a namespace: an operator run outside the cluster is no pod to name."""
    return Peer({NAMESPACE_NAME_LABEL: namespace}, pod_labels) if namespace else None


def labelled_peer(namespace_labels: Mapping[str, str], pod_labels: Mapping[str, str]) -> Peer | None:
    """A peer given by labels; None when none are given, since an empty peer would admit every pod of the cluster."""
    return Peer(namespace_labels, pod_labels) if namespace_labels or pod_labels else None


@dataclass(frozen=True)
class NetworkPeers:
    """Who ``spec.networkPolicy`` admits besides the router; None: no rule for it."""

    operator: Peer | None = None
    prometheus: Peer | None = None


@dataclass(frozen=True)
class RenderSettings:
    """The operator's configuration that rendering reads (``all_children``)."""

    images: Images = field(default_factory=Images)
    peers: NetworkPeers = field(default_factory=NetworkPeers)


def parse_label(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a Kubernetes label (the flags' form); ValueError saying what is wrong."""
    key, sep, value = text.partition("=")
    if not sep or not re.match(RESOURCE_NAME_PATTERN, key) or len(key.rpartition("/")[2]) > 63:
        raise ValueError(f"expected a label KEY=VALUE with a Kubernetes label key, got {text!r}")
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"label value {value!r} is not a Kubernetes label value (63 characters: A-Z a-z 0-9 - _ .)")
    return key, value


def parse_labels(texts: Iterable[str]) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` flags as one mapping (a repeated key takes the last value)."""
    return dict(parse_label(text) for text in texts)


def from_flags(
    *,
    engine_image: str | None,
    router_image: str | None,
    namespace: str | None,
    pod_labels: Iterable[str],
    prometheus_namespace_labels: Iterable[str],
    prometheus_pod_labels: Iterable[str],
) -> RenderSettings:
    """The settings ``paged-operator run``'s flags give (``paged-ctl render`` takes the same); an image not given is
    this release's; ``namespace``: the operator's own. ValueError: a label that is not one."""
    return RenderSettings(
        images=Images(engine=engine_image or DEFAULT_ENGINE_IMAGE, router=router_image or DEFAULT_ROUTER_IMAGE),
        peers=NetworkPeers(
            operator=operator_peer(namespace, parse_labels(pod_labels)),
            prometheus=labelled_peer(parse_labels(prometheus_namespace_labels), parse_labels(prometheus_pod_labels)),
        ),
    )
