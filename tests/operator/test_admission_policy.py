"""What a ModelDeployment may name through the operator's identity: ServiceAccounts, volume types and images
beyond the defaults only where the chart allows them, each refusal naming the value and the chart value."""

from __future__ import annotations

from typing import Any

import pytest
from paged_operator.policy.admission import AdmissionPolicy, violations
from paged_operator.render.settings import Images
from paged_platform.api import ModelDeployment
from paged_platform.api.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE

NONE = AdmissionPolicy()
RELEASE = Images()


def md(**spec: Any) -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "team"}, "spec": spec})


def test_what_the_operator_renders_itself_is_always_allowed() -> None:
    assert violations(md(), NONE, RELEASE) == []
    assert (
        violations(md(pod={"serviceAccountName": "default"}, engine={"image": DEFAULT_ENGINE_IMAGE}), NONE, RELEASE)
        == []
    )
    restricted = [
        {"name": "t", "configMap": {"name": "t"}},
        {"name": "s", "secret": {"secretName": "s"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
    ]
    assert violations(md(pod={"volumes": restricted}), NONE, RELEASE) == []


def test_another_service_account_is_refused_until_the_chart_allows_it() -> None:
    spec = md(pod={"serviceAccountName": "cluster-admin-sa"})
    (why,) = violations(spec, NONE, RELEASE)
    assert "spec.pod.serviceAccountName 'cluster-admin-sa'" in why and "policy.allowedServiceAccounts" in why
    assert violations(spec, AdmissionPolicy(service_accounts=frozenset({"cluster-admin-sa"})), RELEASE) == []


def test_a_host_path_is_refused_until_the_chart_allows_its_type() -> None:
    spec = md(pod={"volumes": [{"name": "root", "hostPath": {"path": "/"}}]})
    (why,) = violations(spec, NONE, RELEASE)
    assert "spec.pod.volumes[0] ('root') is a hostPath volume" in why and "policy.allowedVolumeTypes" in why
    assert violations(spec, AdmissionPolicy(volume_types=frozenset({"hostPath"})), RELEASE) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"engine": {"image": "evil.example.com/miner:1"}}, "spec.engine.image"),
        ({"router": {"enabled": True, "image": "evil.example.com/router:1"}}, "spec.router.image"),
        ({"model": {"image": {"reference": "evil.example.com/models/m:1"}}}, "spec.model.image.reference"),
        ({"adapters": [{"name": "a", "source": {"image": {"reference": "evil.example.com/a:1"}}}]},
         "spec.adapters[0].source.image.reference"),
    ],
)  # fmt: skip
def test_every_image_a_spec_names_must_match_the_allowed_patterns(spec: dict[str, Any], field: str) -> None:
    (why,) = violations(md(**spec), NONE, RELEASE)
    assert why.startswith(f"{field} 'evil.example.com/") and "policy.allowedImages" in why
    assert violations(md(**spec), AdmissionPolicy(images=("evil.example.com/*",)), RELEASE) == []
    assert violations(md(**spec), AdmissionPolicy(images=("evil.example.com/x*",)), RELEASE) != []


def test_the_operators_configured_images_are_its_own() -> None:
    """A mirror registry (--engine-image, --router-image): what the operator renders for an unset image is allowed,
    and so is naming it; this release's images stay allowed."""
    mirror = Images(engine="mirror.example.com/paged-engine:0.1.0", router="mirror.example.com/paged-operator:0.1.0")
    with_router = md(router={"enabled": True})
    assert violations(with_router, NONE, mirror) == []
    assert violations(md(engine={"image": mirror.engine}), NONE, mirror) == []
    release = md(engine={"image": DEFAULT_ENGINE_IMAGE}, router={"enabled": True, "image": DEFAULT_ROUTER_IMAGE})
    assert violations(release, NONE, mirror) == []
    (why,) = violations(md(engine={"image": mirror.engine}), NONE, RELEASE)  # another operator's image is not
    assert why.startswith("spec.engine.image 'mirror.example.com/paged-engine:0.1.0' is not allowed")
