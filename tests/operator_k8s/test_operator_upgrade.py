"""An operator upgrade rolls its engines and routers: a ``paged-operator`` process, as the chart's ServiceAccount, runs
with one pair of default images (``--engine-image``, ``--router-image``: the chart's ``images`` values); it is
stopped and started again with another pair, as a chart upgrade replaces it. kopf's ``on.resume`` reconciles every
object at that start, so the ModelDeployments that name no image roll onto the new ones, within their rollout
settings, while one that pins an image stays on it, not rolled at all. The Deployment controller and kwok really
roll the pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from paged_operator.render import children
from paged_operator.render.router import ROUTER_LABEL
from paged_operator.render.settings import Images
from paged_operator.status import builder as status_builder

from e2e.cluster.access import ServiceAccountAccess
from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import md_path, model_deployment

pytestmark = pytest.mark.k8s
REGISTRY = "registry.example.com/paged"
OLD = Images(engine=f"{REGISTRY}/paged-engine:0.1.0", router=f"{REGISTRY}/paged-operator:0.1.0")
NEW = Images(engine=f"{REGISTRY}/paged-engine:0.2.0", router=f"{REGISTRY}/paged-operator:0.2.0")
PINNED = f"{REGISTRY}/paged-engine:0.1.0-patched"
#: One replica at a time, as the engines' PodDisruptionBudget allows: no surge, so capacity dips by one at most.
ROLLOUT = {"maxSurge": 0, "maxUnavailable": 1}
REPLICAS = 2


def flags(images: Images) -> tuple[str, ...]:
    """The operator's arguments as the chart renders them for these images (and a policy allowing the pinned one)."""
    return f"--engine-image={images.engine}", f"--router-image={images.router}", f"--allowed-image={PINNED}"


def deployment(client: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")


def image(dep: dict[str, Any]) -> str:
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return container["image"]


def rolled_out(client: KubeClient, ns: str, name: str, selector: str, want: str) -> bool:
    """Every pod of the Deployment runs ``want`` and is ready, and the controller says the rollout is complete."""
    dep = deployment(client, ns, name)
    status, replicas = dep.get("status") or {}, dep["spec"]["replicas"]
    pods = client.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return (
        image(dep) == want
        and status.get("observedGeneration") == dep["metadata"]["generation"]
        and status.get("updatedReplicas") == status.get("readyReplicas") == replicas
        and len(live) == replicas
        and all(p["spec"]["containers"][0]["image"] == want and status_builder.pod_is_ready(p) for p in live)
    )


def test_an_operator_upgrade_rolls_the_engines_and_routers_that_name_no_image(
    kube_admin: KubeClient,
    kube_namespace: str,
    chart_access: ServiceAccountAccess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = kube_namespace
    monkeypatch.setenv("PAGED_ROUTER_CLUSTER_ROLE", "test-paged-router")  # as the chart sets it on the operator
    selectors = {
        "follows": f"{children.MODEL_DEPLOYMENT_LABEL}=follows",
        "follows-router": f"{ROUTER_LABEL}=follows",
        "pinned": f"{children.MODEL_DEPLOYMENT_LABEL}=pinned",
    }

    def on(name: str, want: str) -> bool:
        return rolled_out(kube_admin, ns, name, selectors[name], want)

    operator = OperatorProcess(chart_access.kubeconfig, ns, tmp_path, extra_args=flags(OLD)).start()
    try:
        replicas = {"min": REPLICAS, "max": REPLICAS}
        kube_admin.create(md_path(ns), model_deployment("follows", replicas=replicas, rollout=ROLLOUT,
                                                        router={"enabled": True}))  # fmt: skip
        kube_admin.create(md_path(ns), model_deployment("pinned", engine={"image": PINNED}))
        wait_for("the engines on the old image", lambda: on("follows", OLD.engine), 90)
        wait_for("the router on the old image", lambda: on("follows-router", OLD.router), 90)
        wait_for("the pinned engines", lambda: on("pinned", PINNED), 90)
        pinned_generation = deployment(kube_admin, ns, "pinned")["metadata"]["generation"]

        operator.stop()  # the upgrade: the same operator identity, started with the new release's images
        operator.extra_args = flags(NEW)
        operator.start()

        lowest = [REPLICAS]

        def engines_rolled() -> bool:
            ready = (deployment(kube_admin, ns, "follows").get("status") or {}).get("readyReplicas", 0)
            lowest[0] = min(lowest[0], ready)
            return on("follows", NEW.engine)

        wait_for("the engines rolled onto the new image", engines_rolled, 120)
        assert lowest[0] >= REPLICAS - ROLLOUT["maxUnavailable"]  # never more down than the rollout allows
        strategy = deployment(kube_admin, ns, "follows")["spec"]["strategy"]
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": ROLLOUT}
        wait_for("the router rolled onto the new image", lambda: on("follows-router", NEW.router), 90)
        router_strategy = deployment(kube_admin, ns, "follows-router")["spec"]["strategy"]["rollingUpdate"]
        assert router_strategy == {"maxSurge": 1, "maxUnavailable": 0}  # a router is up throughout
        pinned_now = deployment(kube_admin, ns, "pinned")
        assert image(pinned_now) == PINNED and pinned_now["metadata"]["generation"] == pinned_generation
        operator.ensure_alive()
    finally:
        operator.stop()
