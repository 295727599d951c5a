"""The child manifests built from a ModelDeployment (pure builders, no cluster)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paged_engine.engine.config import EngineConfig
from paged_engine.server.config import ServerConfig
from paged_operator.policy.config import live_limits
from paged_operator.render import children
from paged_operator.render.settings import Images
from paged_platform.api import ModelDeployment
from paged_platform.api.spec import DEFAULT_ENGINE_IMAGE
from paged_platform.engine_contract.budgets import Budgets
from paged_platform.engine_contract.launch import ADMIN_TOKEN_ENV, MAX_NUM_SEQS_ENV

from tests.kubelet_env import container_environment, engine_started_by

UID = "7f1c8d2e-0000-4000-8000-000000000001"


def md(spec: dict[str, Any] | None = None, name: str = "gemma") -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": name, "namespace": "team-a"}, "spec": spec or {}})


def engine_container(obj: ModelDeployment) -> dict[str, Any]:
    (container,) = children.deployment(obj, UID)["spec"]["template"]["spec"]["containers"]
    return container


def test_every_child_is_owned_by_the_model_deployment_and_labelled() -> None:
    obj = md()
    built = [
        children.deployment(obj, UID),
        children.service(obj, UID),
        children.config_map(obj, UID, Budgets(64, 2048)),
        children.pod_disruption_budget(obj, UID),
        children.admin_secret(obj, UID, "x" * 32),
    ]
    for child in built:
        meta = child["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "paged.dev/v1alpha1",
                "kind": "ModelDeployment",
                "name": "gemma",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"][children.MODEL_DEPLOYMENT_LABEL] == "gemma"
    assert len({(c["kind"], c["metadata"]["name"]) for c in built}) == len(built)


def test_owner_without_uid_or_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no metadata\.uid"):
        children.service(md(), "")
    orphan = ModelDeployment.model_validate({"metadata": {"name": "gemma"}})
    with pytest.raises(ValueError, match="no namespace"):
        children.service(orphan, UID)


def test_deployment_leaves_replicas_to_the_replica_manager() -> None:
    dep = children.deployment(md({"replicas": {"min": 2, "max": 4}}), UID)
    assert "replicas" not in dep["spec"]
    patch = children.replicas_patch(md(), 3)
    assert patch["spec"] == {"replicas": 3} and patch["metadata"] == {"name": "gemma", "namespace": "team-a"}
    with pytest.raises(ValueError, match="must not be negative"):
        children.replicas_patch(md(), -1)


def test_engine_container_probes_drain_and_grace() -> None:
    container = engine_container(md())
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": "/ready", "port": "http"}  # the model loaded, not just the port open
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600  # a CPU replica's default budget
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # the crash's log tail in the status
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python", "-c"]
    compile(command[2], "preStop", "exec")  # the hook is valid Python
    assert "/admin/drain?wait_seconds=60" in command[2] and "PAGED_ADMIN_TOKEN" in command[2]
    pod = children.deployment(md(), UID)["spec"]["template"]["spec"]
    # The grace period covers the drain wait plus the engine's own shutdown.
    assert pod["terminationGracePeriodSeconds"] > children.DRAIN_WAIT_S + children.SHUTDOWN_GRACE_S


@pytest.mark.parametrize(
    ("spec", "budget_s"),
    [({}, 600), ({"resources": {"gpus": 1}}, 1800), ({"engine": {"startupTimeoutSeconds": 93}}, 95)],
)
def test_the_start_up_budget_comes_from_the_spec_or_the_device(spec: dict[str, Any], budget_s: int) -> None:
    """A load that hangs past it is restarted by the kubelet: the probe's period times its threshold covers it."""
    startup = engine_container(md(spec))["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == budget_s


def started(obj: ModelDeployment, budgets: Budgets | None = None) -> tuple[Any, EngineConfig, ServerConfig]:
    """What the engine of ``obj``'s pods starts with: its args and the environment the kubelet gives it."""
    container = engine_container(obj)
    cm = children.config_map(obj, UID, budgets or children.config_map_budgets(obj, None))
    secret = {"token": "t" * 32}
    env = container_environment(container["env"], {}, {cm["metadata"]["name"]: cm["data"]},
                                {children.secret_name(obj): secret})  # fmt: skip
    return engine_started_by(container, env)


def test_the_engine_starts_with_what_the_spec_renders() -> None:
    obj = md(
        {
            "engine": {"maxModelLen": 1024, "kvCacheMemory": "64Mi", "blockSize": 32, "extraArgs": ["--seed", "7"]},
            "schedulerBudget": {"maxNumSeqs": 12, "maxNumBatchedTokens": 512},
        }
    )
    assert engine_container(obj)["command"] == ["paged-engine"]
    args, config, server = started(obj)
    assert (args.model, server.host, server.port, server.admin_port) == (
        "default",
        "0.0.0.0",
        children.ENGINE_PORT,
        children.ADMIN_PORT,
    )
    scheduler = config.scheduler.resolved("cpu", serving=True)
    assert scheduler.budgets == Budgets(12, 512)  # from the ConfigMap, through the environment
    assert scheduler.live_limits() == live_limits(obj.spec)  # the flags the operator rendered
    assert (config.scheduler.max_model_len, config.kv_cache_memory, config.block_size, config.seed) == (
        1024,
        64 * 2**20,
        32,
        7,
    )
    assert server.model_name(config.model) == "gemma-3-270m" and server.admin_token == "t" * 32
    refs = {e["name"]: e["valueFrom"] for e in engine_container(obj)["env"]}
    assert refs[ADMIN_TOKEN_ENV] == {"secretKeyRef": {"name": "gemma-admin-token", "key": "token"}}
    assert refs[MAX_NUM_SEQS_ENV] == {"configMapKeyRef": {"name": "gemma-engine", "key": "maxNumSeqs"}}


def test_unset_budgets_start_by_the_engines_rule_for_the_pods_device() -> None:
    assert started(md())[1].scheduler.resolved("cpu", serving=True).budgets == Budgets(128, 512)
    gpu = md({"resources": {"gpus": 1}})
    args, config, _ = started(gpu)
    assert args.device == "cuda" and config.scheduler.resolved("cuda", serving=True).budgets == Budgets(128, 2048)


def test_live_limits_admit_the_tuners_bounds_and_change_only_past_the_floor() -> None:
    tuned = md({"schedulerBudget": {"adaptive": {"enabled": True, "maxNumSeqs": {"min": 8, "max": 1024},
                                                 "maxNumBatchedTokens": {"min": 512, "max": 65536}}}})  # fmt: skip
    limits = started(tuned, Budgets(1024, 65536))[1].scheduler.resolved("cpu", serving=True).live_limits()
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (1024, 65536)
    # a static budget below the floors leaves the flags, so the pods, as they are
    assert children.engine_args(md({"schedulerBudget": {"maxNumSeqs": 200}})) == children.engine_args(md())
    assert "--max-num-seqs-limit" in children.engine_args(md()) and "300" in children.engine_args(
        md({"schedulerBudget": {"maxNumSeqs": 300, "maxNumBatchedTokens": 300}})
    )


def test_resources_gpus_scheduling_and_rollout_follow_the_spec() -> None:
    obj = md(
        {
            "resources": {
                "cpu": "4",
                "memory": "8Gi",
                "gpus": 1,
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
            "rollout": {"maxSurge": "25%", "maxUnavailable": 1},
        }
    )
    dep = children.deployment(obj, UID)
    pod = dep["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"},
    }
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": 1}
    # A GPU replica runs the engine on the GPU, and fails loudly at start-up if none is visible.
    args = pod["containers"][0]["args"]
    assert args[args.index("--device") + 1] == "cuda"
    assert "--device" not in children.deployment(md(), UID)["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_older_model_forms_render_as_their_new_sources() -> None:
    path_model = md({"model": {"name": "/models/qwen", "volume": {"claimName": "weights"}}})
    pod = children.deployment(path_model, UID)["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "model", "mountPath": "/models", "readOnly": True}
    assert pod["containers"][0]["args"][1] == "/models/qwen"
    hub = md({"model": {"name": "Qwen/Qwen2.5-0.5B"}})
    pod = children.deployment(hub, UID)["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model-cache", "emptyDir": {}}
    assert pod["initContainers"][0]["args"][:4] == ["download", "Qwen/Qwen2.5-0.5B", "--revision", "main"]
    assert pod["containers"][0]["args"][1] == "/model-cache/hub/Qwen--Qwen2.5-0.5B/main"
    assert "initContainers" not in children.deployment(md(), UID)["spec"]["template"]["spec"]


def test_service_pdb_and_endpoint() -> None:
    obj = md({"service": {"port": 9000, "type": "NodePort"}})
    svc = children.service(obj, UID)
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": "http"}]
    assert svc["spec"]["selector"] == {children.MODEL_DEPLOYMENT_LABEL: "gemma"}
    pdb = children.pod_disruption_budget(obj, UID)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": svc["spec"]["selector"]}}
    assert children.endpoint(obj) == "http://gemma.team-a.svc:9000/v1"
    assert children.selector_string(obj) == "paged.dev/model-deployment=gemma"


def test_config_map_records_budgets_and_engine_config() -> None:
    obj = md()
    cm = children.config_map(obj, UID, Budgets(32, 1024))
    assert cm["data"]["maxNumSeqs"] == "32" and cm["data"]["maxNumBatchedTokens"] == "1024"
    assert json.loads(cm["data"]["engine.json"])["budgets"] == {"maxNumSeqs": 32, "maxNumBatchedTokens": 1024}
    assert cm["metadata"]["annotations"] == {children.SPEC_BUDGET_ANNOTATION: "128/512"}  # the engine's defaults
    assert children.budgets_from_config_map(cm["data"]) == Budgets(32, 1024)


@pytest.mark.parametrize(
    "data",
    [
        None,
        {},
        {"maxNumSeqs": "x", "maxNumBatchedTokens": "2"},
        {"maxNumSeqs": "64", "maxNumBatchedTokens": "8"},
        {"maxNumSeqs": "5000", "maxNumBatchedTokens": "8192"},  # beyond the contract's bounds
    ],
)
def test_unreadable_config_map_budgets_are_none(data: dict[str, str] | None) -> None:
    assert children.budgets_from_config_map(data) is None


ADAPTIVE = {
    "schedulerBudget": {
        "maxNumSeqs": 16,
        "maxNumBatchedTokens": 1024,
        "adaptive": {
            "enabled": True,
            "maxNumSeqs": {"min": 4, "max": 48},
            "maxNumBatchedTokens": {"min": 256, "max": 4096},
        },
    }
}


def test_config_map_budgets_keep_tuned_values_until_the_spec_budget_changes() -> None:
    obj = md(ADAPTIVE)
    assert children.config_map_budgets(obj, None) == Budgets(16, 1024)
    tuned = children.config_map(obj, UID, Budgets(40, 2048))
    assert children.config_map_budgets(obj, tuned) == Budgets(40, 2048)
    # Tighter bounds clamp the tuned value.
    bounds = {"enabled": True, "maxNumSeqs": {"min": 4, "max": 32}, "maxNumBatchedTokens": {"min": 256, "max": 4096}}
    tighter = md({"schedulerBudget": {**ADAPTIVE["schedulerBudget"], "adaptive": bounds}})
    assert children.config_map_budgets(tighter, tuned) == Budgets(32, 2048)
    # The user set a new static budget: it wins over the tuned one.
    changed = md({**ADAPTIVE, "schedulerBudget": {**ADAPTIVE["schedulerBudget"], "maxNumSeqs": 8}})
    assert children.config_map_budgets(changed, tuned) == Budgets(8, 1024)
    # Without the tuner the spec's budget is always the one.
    assert children.config_map_budgets(md(), children.config_map(md(), UID, Budgets(40, 2048))) == Budgets(128, 512)


def test_admin_secret_needs_a_real_token() -> None:
    secret = children.admin_secret(md(), UID, "t" * 32)
    assert secret["stringData"] == {"token": "t" * 32} and secret["metadata"]["name"] == "gemma-admin-token"
    with pytest.raises(ValueError, match="at least 16 characters, got 4"):
        children.admin_secret(md(), UID, "abcd")


def test_an_unset_image_is_the_operators_own_at_render_time_so_an_upgrade_rolls() -> None:
    """CRD defaulting does not write the image into the object: the operator that renders decides (its
    --engine-image), so an operator started with a new image renders a new pod template, and the Deployment rolls;
    the model's download init container runs the same image."""
    obj = md({"model": {"huggingFace": {"id": "org/model"}}})
    assert "image" not in obj.spec.engine.to_wire()
    release = children.deployment(obj, UID)["spec"]["template"]["spec"]
    assert release["containers"][0]["image"] == DEFAULT_ENGINE_IMAGE
    upgraded = Images(engine="ghcr.io/paged/paged-engine:0.2.0")
    pod = children.deployment(obj, UID, upgraded)["spec"]["template"]["spec"]
    assert [c["image"] for c in (*pod["containers"], *pod["initContainers"])] == [upgraded.engine] * 2
    pinned = md({"engine": {"image": "registry.local/engine:pinned"}})
    assert engine_container(pinned)["image"] == "registry.local/engine:pinned"
    (container,) = children.deployment(pinned, UID, upgraded)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.local/engine:pinned"
