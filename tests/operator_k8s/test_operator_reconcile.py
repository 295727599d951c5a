"""The operator's reconcile loop against the real control plane, running as the chart's ServiceAccount.

No engine runs in these kwok pods, so no replica ever answers ``/ready``: the operator must report the
replicas as not ready (``Ready=False``) while the Deployment itself is available.
"""

from __future__ import annotations

import base64
import signal
from typing import Any

import pytest
from paged_platform.engine_contract.budgets import resolve_budgets

from e2e.cluster.client import ApiError, KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import condition, get_or_none, md_path, model_deployment, settle

pytestmark = pytest.mark.k8s

FAST = {"intervalSeconds": 5}


def apps(ns: str, kind: str = "deployments") -> str:
    return f"/apis/apps/v1/namespaces/{ns}/{kind}"


def children_paths(ns: str, name: str) -> dict[str, str]:
    return {
        "Deployment": f"{apps(ns)}/{name}",
        "Service": f"/api/v1/namespaces/{ns}/services/{name}",
        "ConfigMap": f"/api/v1/namespaces/{ns}/configmaps/{name}-engine",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
        "Secret": f"/api/v1/namespaces/{ns}/secrets/{name}-admin-token",
    }


def status_at_generation(client: KubeClient, ns: str, name: str, generation: int) -> dict[str, Any] | None:
    obj = client.get(md_path(ns, name))
    return obj if (obj.get("status") or {}).get("observedGeneration") == generation else None


def deployment_replicas(client: KubeClient, ns: str, name: str, want: int) -> dict[str, Any] | None:
    dep = get_or_none(client, f"{apps(ns)}/{name}")
    return dep if dep is not None and dep["spec"].get("replicas") == want else None


def test_applying_creates_owned_children_with_status_events_and_metrics(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    owner = kube_admin.create(md_path(ns), model_deployment("gemma", replicas={"min": 2, "max": 3}, autoscaling=FAST))
    uid = owner["metadata"]["uid"]
    dep = wait_for("Deployment with 2 replicas", lambda: deployment_replicas(kube_admin, ns, "gemma", 2), 60)

    for kind, path in children_paths(ns, "gemma").items():
        child = kube_admin.get(path)
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("ModelDeployment", uid, True), kind
    managers = {m["manager"] for m in dep["metadata"]["managedFields"] if m["operation"] == "Apply"}
    assert managers == {"paged-operator", "paged-operator-replicas"}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert "preStop" in container["lifecycle"]

    def settled() -> dict[str, Any] | None:
        obj = status_at_generation(kube_admin, ns, "gemma", 1)
        progressing = condition(obj, "Progressing") if obj else None
        return obj if progressing and progressing["reason"] == "Stable" and condition(obj, "Degraded") else None

    obj = wait_for("status of generation 1, rollout finished", settled, 90)
    status = obj["status"]
    assert status["desiredReplicas"] == 2 and status["replicas"] == 2
    assert status["selector"] == "paged.dev/model-deployment=gemma"
    assert status["endpoint"] == f"http://gemma.{ns}.svc:8000/v1"
    # schedulerBudget unset: the engine's own defaults for a CPU server (the engine contract's rule)
    start = resolve_budgets(None, None, device_type="cpu", serving=True)
    assert status["budget"] == {"maxNumSeqs": start.max_num_seqs, "maxNumBatchedTokens": start.max_num_batched_tokens}
    ready = condition(obj, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "MinimumReplicasUnavailable")
    assert status["readyReplicas"] == 0  # kwok says Ready, but no engine answers /ready
    assert condition(obj, "ScalingLimited") is not None

    events = kube_admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector="involvedObject.name=gemma")["items"]
    assert any(e["reason"] == "Applied" and "generation 1" in e["message"] for e in events)
    metrics = operator.metrics()
    assert 'paged_operator_reconciles_total{handler="reconcile",result="success"}' in metrics
    assert f'paged_operator_desired_replicas{{name="gemma",namespace="{ns}"}} 2.0' in metrics


def test_editing_the_spec_rolls_the_deployment(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("roll", autoscaling=FAST))
    wait_for("generation 1 observed", lambda: status_at_generation(kube_admin, ns, "roll", 1), 60)
    before = kube_admin.get(f"{apps(ns)}/roll")

    kube_admin.patch(md_path(ns, "roll"), {"spec": {"engine": {"maxModelLen": 512}}})
    wait_for("generation 2 observed", lambda: status_at_generation(kube_admin, ns, "roll", 2), 60)
    after = kube_admin.get(f"{apps(ns)}/roll")
    args = after["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-model-len") + 1] == "512"
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    wait_for("a second ReplicaSet", lambda: len(kube_admin.get(apps(ns, "replicasets"))["items"]) == 2, 60)


def test_invalid_objects_are_refused_by_the_api_server(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str
) -> None:
    for spec, message in [
        ({"replicas": {"min": 3, "max": 2}}, "replicas.min must not exceed replicas.max"),
        ({"engine": {"blockSize": 7}}, "spec.engine.blockSize"),
        ({"model": {"name": "/models/x"}}, "model.volume must name the PersistentVolumeClaim"),
    ]:
        with pytest.raises(ApiError) as refused:
            kube_admin.create(md_path(kube_namespace), model_deployment("bad", **spec))
        assert refused.value.code == 422 and message in refused.value.message


def test_deleting_the_model_deployment_cleans_up_its_children(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("gone", autoscaling=FAST))
    paths = children_paths(ns, "gone")
    wait_for("all children", lambda: all(kube_admin.exists(p) for p in paths.values()), 60)
    kube_admin.delete(md_path(ns, "gone"))
    wait_for("children collected", lambda: not any(kube_admin.exists(p) for p in paths.values()), 90)
    wait_for("engine pods collected", lambda: not kube_admin.get(f"/api/v1/namespaces/{ns}/pods")["items"], 90)


def test_kubectl_scale_sets_the_minimum_through_the_scale_subresource(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(
        md_path(ns), model_deployment("scaled", replicas={"min": 1, "max": 4}, autoscaling={"enabled": False})
    )
    wait_for("1 replica", lambda: deployment_replicas(kube_admin, ns, "scaled", 1), 60)
    # What `kubectl scale md scaled --replicas=3` sends.
    kube_admin.patch(f"{md_path(ns, 'scaled')}/scale", {"spec": {"replicas": 3}})
    assert kube_admin.get(md_path(ns, "scaled"))["spec"]["replicas"]["min"] == 3
    wait_for("3 replicas", lambda: deployment_replicas(kube_admin, ns, "scaled", 3), 60)
    scale = wait_for(
        "scale status 3",
        lambda: (s := kube_admin.get(f"{md_path(ns, 'scaled')}/scale"))["status"].get("replicas") == 3 and s,
        60,
    )
    assert scale["status"]["selector"] == "paged.dev/model-deployment=scaled"
    with pytest.raises(ApiError) as refused:  # above max
        kube_admin.patch(f"{md_path(ns, 'scaled')}/scale", {"spec": {"replicas": 5}})
    assert refused.value.code == 422


def test_a_scaler_on_an_autoscaled_model_deployment_is_reported(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    """With autoscaling on, ``min`` is the autoscaler's floor: a scale-subresource write (an HPA's, here) raises it,
    and the status says that this is not the count an external scaler may think it is; a plain spec edit of
    ``min`` afterwards clears it."""
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("both", replicas={"min": 1, "max": 4}, autoscaling=FAST))
    wait_for("generation 1 observed", lambda: status_at_generation(kube_admin, ns, "both", 1), 60)
    kube_admin.request(
        "PATCH",
        f"{md_path(ns, 'both')}/scale",
        {"spec": {"replicas": 2}},
        params={"fieldManager": "kube-controller-manager"},
        content_type="application/merge-patch+json",
    )
    wait_for("the floor raised", lambda: deployment_replicas(kube_admin, ns, "both", 2), 60)

    def limited_by(reason: str) -> dict[str, Any] | None:
        found = condition(kube_admin.get(md_path(ns, "both")), "ScalingLimited")
        return found if found and found["reason"] == reason else None

    reported = wait_for("ScalingLimited=ExternalScaler", lambda: limited_by("ExternalScaler"), 30)
    assert reported["status"] == "True" and "by kube-controller-manager" in reported["message"]
    assert "autoscaling.enabled: false" in reported["message"]
    kube_admin.request(
        "PATCH",
        md_path(ns, "both"),
        {"spec": {"replicas": {"min": 1}}},
        params={"fieldManager": "kubectl-edit"},
        content_type="application/merge-patch+json",
    )
    wait_for("the report cleared", lambda: not limited_by("ExternalScaler"), 30)


def test_the_operator_is_the_only_writer_of_replicas(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("owned", replicas={"min": 1, "max": 2}, autoscaling=FAST))
    wait_for("1 replica", lambda: deployment_replicas(kube_admin, ns, "owned", 1), 60)
    wait_for("generation 1 observed", lambda: status_at_generation(kube_admin, ns, "owned", 1), 60)
    kube_admin.patch(f"{apps(ns)}/owned", {"spec": {"replicas": 5}})
    wait_for("replicas set back to 1", lambda: deployment_replicas(kube_admin, ns, "owned", 1), 30)


def test_with_autoscaling_off_an_external_scaler_owns_the_count(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    """An HPA or KEDA on the engine Deployment (here: a scale-subresource write, as the HPA controller makes)."""
    ns = kube_namespace
    off = {"enabled": False, "intervalSeconds": 5}
    kube_admin.create(md_path(ns), model_deployment("external", replicas={"min": 1, "max": 2}, autoscaling=off))
    wait_for("1 replica", lambda: deployment_replicas(kube_admin, ns, "external", 1), 60)
    wait_for("generation 1 observed", lambda: status_at_generation(kube_admin, ns, "external", 1), 60)
    kube_admin.patch(f"{apps(ns)}/external/scale", {"spec": {"replicas": 4}})
    settle(12)  # two decision intervals
    assert deployment_replicas(kube_admin, ns, "external", 4) is not None  # left alone
    # A spec edit does not take the count back either.
    kube_admin.patch(md_path(ns, "external"), {"spec": {"engine": {"extraArgs": ["--seed", "1"]}}})
    wait_for("generation 2 observed", lambda: status_at_generation(kube_admin, ns, "external", 2), 60)
    settle(6)
    assert deployment_replicas(kube_admin, ns, "external", 4) is not None


def test_restarting_the_operator_mid_reconcile_converges_without_duplicates(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    names = [f"md-{i}" for i in range(3)]
    for name in names:
        kube_admin.create(md_path(ns), model_deployment(name, replicas={"min": 2, "max": 2}, autoscaling=FAST))
    wait_for("a first Deployment", lambda: kube_admin.get(apps(ns))["items"], 60)
    operator.stop(signal.SIGKILL)  # no cleanup: whatever was half done stays half done
    tokens = {
        name: secret["data"]["token"]
        for name in names
        if (secret := get_or_none(kube_admin, children_paths(ns, name)["Secret"]))
    }
    operator.start()

    for name in names:
        wait_for(f"{name} observed", lambda name=name: status_at_generation(kube_admin, ns, name, 1), 90)
        wait_for(f"{name} at 2 replicas", lambda name=name: deployment_replicas(kube_admin, ns, name, 2), 60)
    settle(6)  # a decision interval: nothing more may appear
    assert sorted(d["metadata"]["name"] for d in kube_admin.get(apps(ns))["items"]) == names
    replica_sets = kube_admin.get(apps(ns, "replicasets"))["items"]
    assert len(replica_sets) == 3  # no spurious rollout after the restart
    assert len(kube_admin.get(f"/api/v1/namespaces/{ns}/pods")["items"]) == 6
    for name in names:
        secret = kube_admin.get(children_paths(ns, name)["Secret"])
        assert len(base64.b64decode(secret["data"]["token"])) >= 16
        if name in tokens:  # the engines' admin token survives the restart
            assert secret["data"]["token"] == tokens[name]
