"""Pure builders: one ModelDeployment → the manifests of its children (Deployment, Service, ConfigMap, PDB, Secret).

Nothing here talks to the API server, so every field the operator writes is unit-tested without a cluster.
How the model reaches the pod (volumes, the download init container) is ``model_mounts``; the security settings
and writable folders are ``pod_security``; ``spec.pod`` is passed through as written.

Budgets reach the engine through the ConfigMap: the container reads ``maxNumSeqs`` and
``maxNumBatchedTokens`` from it as the environment variables the engine takes its budgets from (the engine
contract's names). Kubernetes resolves them when a pod is created, so a pod started after the tuner changed the
budgets starts with the tuned values, and a budget change never rolls the Deployment (running pods get it through
the admin API). The live limits are start-up flags (``policy.config.live_limits``): they admit every budget the
spec starts with or the tuner may set, and change, rolling the pods, only when those bounds grow past them.
Every flag and variable name is the engine contract's (``paged_platform.engine_contract.launch``).

The Deployment manifest carries no ``spec.replicas``: the operator writes the replica count separately
(``replicas_patch``, under its own field manager), so applying the children never resets it.
"""

from __future__ import annotations

import json
from typing import Any

from paged_platform.api import API_VERSION, KIND, ModelDeployment
from paged_platform.engine_contract import admin as engine_admin
from paged_platform.engine_contract.budgets import Budgets
from paged_platform.engine_contract.launch import (
    ADMIN_TOKEN_ENV,
    API_KEY_ENV,
    COMMAND,
    MAX_NUM_BATCHED_TOKENS_ENV,
    MAX_NUM_SEQS_ENV,
    SERVE,
    ServeFlag,
)

from paged_operator.policy.config import controller_spec, live_limits, starting_budgets
from paged_operator.render import pod_security
from paged_operator.render.adapter_mounts import adapter_mounts
from paged_operator.render.model_mounts import DOWNLOAD_CONTAINER, DownloadStep, model_mounts
from paged_operator.render.settings import RELEASE_IMAGES, Images
from paged_operator.render.tracing_env import tracing_args, tracing_env

ENGINE_CONTAINER = "engine"
HTTP_PORT_NAME = "http"
ADMIN_PORT_NAME = "admin"
#: The engine listens on this port in every pod; the Service maps ``spec.service.port`` onto it.
ENGINE_PORT = 8000
#: The admin API's own port: not in the Service, reached by the operator at each pod's IP.
ADMIN_PORT = 8001
#: Keys of the ConfigMap the engine container reads its budgets from.
SEQS_KEY = "maxNumSeqs"
TOKENS_KEY = "maxNumBatchedTokens"
ENGINE_CONFIG_KEY = "engine.json"
#: Key of the admin-token Secret (the engine reads it as ``ADMIN_TOKEN_ENV``).
TOKEN_KEY = "token"
#: The preStop hook waits this long for in-flight requests; the grace period adds the engine's own shutdown.
DRAIN_WAIT_S = 60
#: Before it stops admitting, the preStop drain keeps serving (closing each connection) this long: longer than
#: uvicorn's 5 s keep-alive timeout, so kube-proxy has dropped the endpoint and no client connection is left here.
DRAIN_LINGER_S = 6
SHUTDOWN_GRACE_S = 20
TERMINATION_GRACE_S = DRAIN_LINGER_S + DRAIN_WAIT_S + SHUTDOWN_GRACE_S + 10
STARTUP_PERIOD_S = 5
MODEL_DEPLOYMENT_LABEL = "paged.dev/model-deployment"
#: On the ConfigMap: the spec's static budget its budgets started from ("seqs/tokens").
SPEC_BUDGET_ANNOTATION = "paged.dev/spec-budget"

# preStop: stop admitting and wait for in-flight requests through the admin API. The engine image ships
# Python but no curl; failures are ignored so that a dead engine does not delay its own replacement.
_DRAIN_SCRIPT = (
    "import os, urllib.request as u\n"
    "r = u.Request('http://127.0.0.1:{port}{path}?{wait_param}={wait}&{linger_param}={linger}', method='POST')\n"
    "t = os.environ.get('{env}')\n"
    "t and r.add_header('Authorization', 'Bearer ' + t)\n"
    "try: u.urlopen(r, timeout={timeout}).read()\n"
    "except Exception: pass\n"
)


def deployment_name(md: ModelDeployment) -> str:
    return md.metadata.name


def service_name(md: ModelDeployment) -> str:
    return md.metadata.name


def router_name(md: ModelDeployment) -> str:
    """The optional router's Deployment, Service and ServiceAccount (``router_children``)."""
    return f"{md.metadata.name}-router"


def config_map_name(md: ModelDeployment) -> str:
    return f"{md.metadata.name}-engine"


def pdb_name(md: ModelDeployment) -> str:
    return md.metadata.name


def network_policy_name(md: ModelDeployment) -> str:
    return md.metadata.name


def secret_name(md: ModelDeployment) -> str:
    return f"{md.metadata.name}-admin-token"


def selector_labels(md: ModelDeployment) -> dict[str, str]:
    """The engine pods' selector: immutable on a Deployment, so it holds only the owner's name."""
    return {MODEL_DEPLOYMENT_LABEL: md.metadata.name}


def selector_string(md: ModelDeployment) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(md).items())


def labels(md: ModelDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "paged-engine",
        "app.kubernetes.io/instance": md.metadata.name,
        "app.kubernetes.io/managed-by": "paged-operator",
        **selector_labels(md),
    }


def endpoint(md: ModelDeployment) -> str:
    """In-cluster base URL of the OpenAI-compatible API: the router's Service when ``spec.router`` is enabled."""
    name = router_name(md) if md.spec.router.enabled else service_name(md)
    return f"http://{name}.{md.metadata.namespace}.svc:{md.spec.service.port}/v1"


def owner_reference(md: ModelDeployment, uid: str) -> dict[str, Any]:
    """Makes the child garbage-collected with its ModelDeployment (``controller`` marks us as its manager)."""
    if not uid:
        raise ValueError(f"ModelDeployment {md.metadata.name!r} has no metadata.uid: cannot own children")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": md.metadata.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(md: ModelDeployment, name: str, uid: str) -> dict[str, Any]:
    if not md.metadata.namespace:
        raise ValueError(f"ModelDeployment {md.metadata.name!r} has no namespace")
    return {
        "name": name,
        "namespace": md.metadata.namespace,
        "labels": labels(md),
        "ownerReferences": [owner_reference(md, uid)],
    }


def engine_args(md: ModelDeployment) -> list[str]:
    """``paged-engine`` arguments (the budgets come from the environment, the live limits are flags)."""
    spec, engine = md.spec, md.spec.engine
    limits = live_limits(spec)
    args = [
        SERVE, model_mounts(md).model_arg,
        ServeFlag.HOST, "0.0.0.0",
        ServeFlag.PORT, str(ENGINE_PORT),
        ServeFlag.ADMIN_PORT, str(ADMIN_PORT),
        ServeFlag.SERVED_MODEL_NAME, spec.model.resolved_served_name,
        ServeFlag.DTYPE, engine.dtype,
        ServeFlag.BLOCK_SIZE, str(engine.block_size),
        ServeFlag.MAX_NUM_SEQS_LIMIT, str(limits.max_num_seqs),
        ServeFlag.MAX_NUM_BATCHED_TOKENS_LIMIT, str(limits.max_num_batched_tokens),
        ServeFlag.SHUTDOWN_GRACE_SECONDS, str(SHUTDOWN_GRACE_S),
        ServeFlag.ENABLE_PREFIX_CACHING if engine.enable_prefix_caching else ServeFlag.NO_ENABLE_PREFIX_CACHING,
    ]  # fmt: skip
    if spec.device_type == "cuda":  # fail at start-up, not serve on the node's CPU, when the GPU isn't visible
        args += [ServeFlag.DEVICE, "cuda"]
    if engine.max_model_len is not None:
        args += [ServeFlag.MAX_MODEL_LEN, str(engine.max_model_len)]
    if engine.kv_cache_memory is not None:  # as written: the engine reads quantities and fractions alike
        args += [ServeFlag.KV_CACHE_MEMORY, str(engine.kv_cache_memory)]
    return [str(a) for a in (*args, *adapter_mounts(md).args, *tracing_args(md), *engine.extra_args)]


def _env(md: ModelDeployment) -> list[dict[str, Any]]:
    """The user's ``pod.env`` first, then ``spec.tracing``'s (minus the names the user set), then the operator's
    own (a repeated name takes the later value)."""
    cm, secret, user = config_map_name(md), secret_name(md), md.spec.pod.env
    env: list[dict[str, Any]] = [
        *user,
        *tracing_env(md, "engine", deployment_name(md), user),
        {"name": ADMIN_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": TOKEN_KEY}}},
        {"name": MAX_NUM_SEQS_ENV, "valueFrom": {"configMapKeyRef": {"name": cm, "key": SEQS_KEY}}},
        {"name": MAX_NUM_BATCHED_TOKENS_ENV, "valueFrom": {"configMapKeyRef": {"name": cm, "key": TOKENS_KEY}}},
    ]
    if (ref := md.spec.auth.api_key_secret_ref) is not None:  # never in the args or the ConfigMap
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def _resources(md: ModelDeployment) -> dict[str, Any]:
    res = md.spec.resources
    requests: dict[str, Any] = {"cpu": str(res.cpu), "memory": str(res.memory)}
    limits: dict[str, Any] = {"memory": str(res.memory)}
    if res.gpus:
        requests[res.gpu_resource_name] = str(res.gpus)
        limits[res.gpu_resource_name] = str(res.gpus)
    return {"requests": requests, "limits": limits}


def _http_probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": HTTP_PORT_NAME},
        "periodSeconds": period_s,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def startup_probe_failures(md: ModelDeployment) -> int:
    """The start-up probe's failure threshold: its period times this covers the spec's start-up budget."""
    return -(-md.spec.resolved_startup_timeout_s() // STARTUP_PERIOD_S)


def container(md: ModelDeployment, images: Images = RELEASE_IMAGES) -> dict[str, Any]:
    """The engine container; ``images``: the operator's (what an unset ``engine.image`` means)."""
    engine, pod = md.spec.engine, md.spec.pod
    mounts = model_mounts(md)
    drain = _DRAIN_SCRIPT.format(
        port=ADMIN_PORT, path=engine_admin.DRAIN_PATH, wait_param=engine_admin.DRAIN_WAIT_PARAM, wait=DRAIN_WAIT_S,
        linger_param=engine_admin.DRAIN_LINGER_PARAM, linger=DRAIN_LINGER_S, env=ADMIN_TOKEN_ENV,
        timeout=DRAIN_LINGER_S + DRAIN_WAIT_S + 5,
    )  # fmt: skip
    out: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": images.engine_image(md),
        "imagePullPolicy": engine.image_pull_policy,
        "command": [COMMAND],
        "args": engine_args(md),
        "env": _env(md),
        "ports": [
            {"name": HTTP_PORT_NAME, "containerPort": ENGINE_PORT, "protocol": "TCP"},
            {"name": ADMIN_PORT_NAME, "containerPort": ADMIN_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(md),
        # /ready turns true once the model is loaded: until then (spec.engine.startupTimeoutSeconds) the start-up
        # probe holds liveness off, and a load that hangs past it is restarted. Afterwards /health is false only
        # when the engine core died (/ready also while draining, which must not restart it).
        "startupProbe": _http_probe("/ready", STARTUP_PERIOD_S, startup_probe_failures(md)),
        "livenessProbe": _http_probe("/health", 10, 3),
        "readinessProbe": _http_probe("/ready", 5, 2),
        "lifecycle": {"preStop": {"exec": {"command": ["python", "-c", drain]}}},
        # The last log lines of an engine that exits with an error: the cause EngineCrashLooping reports.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pod_security.container_security_context(),
        "volumeMounts": [
            *mounts.engine_mounts,
            *adapter_mounts(md).engine_mounts,
            *pod_security.writable_mounts(),
            *(m.to_wire() for m in pod.volume_mounts),
        ],
    }
    if pod.env_from:
        out["envFrom"] = list(pod.env_from)
    return out


def download_container(md: ModelDeployment, images: Images = RELEASE_IMAGES) -> dict[str, Any] | None:
    """The init container that fetches a Hugging Face or S3 model into the cache volume; None for other sources.

    It runs the engine image (``paged-engine download``) with the engine's CPU and memory but no GPU, and leaves
    ``Reason: message`` in its termination message when it fails (``model_status`` reads it)."""
    step = model_mounts(md).download
    return None if step is None else _download_container(md, DOWNLOAD_CONTAINER, step, images)


def init_containers(md: ModelDeployment, images: Images = RELEASE_IMAGES) -> list[dict[str, Any]]:
    """The model's download (if any), then one per downloaded adapter."""
    model = download_container(md, images)
    adapters = [_download_container(md, name, step, images) for name, step in adapter_mounts(md).downloads]
    return [model, *adapters] if model is not None else adapters


def _download_container(md: ModelDeployment, name: str, step: DownloadStep, images: Images) -> dict[str, Any]:
    engine, pod, res = md.spec.engine, md.spec.pod, md.spec.resources
    out: dict[str, Any] = {
        "name": name,
        "image": images.engine_image(md),
        "imagePullPolicy": engine.image_pull_policy,
        "command": ["paged-engine"],
        "args": step.args,
        "env": [*pod.env, *step.env],
        "resources": {
            "requests": {"cpu": str(res.cpu), "memory": str(res.memory)},
            "limits": {"memory": str(res.memory)},
        },
        "securityContext": pod_security.container_security_context(),
        "volumeMounts": [step.mount, *pod_security.writable_mounts(shm=False)],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    env_from = [*pod.env_from, *step.env_from]
    if env_from:
        out["envFrom"] = env_from
    return out


def deployment(md: ModelDeployment, uid: str, images: Images = RELEASE_IMAGES) -> dict[str, Any]:
    """The engine Deployment, without ``spec.replicas`` (see the module docstring)."""
    res, rollout, pod = md.spec.resources, md.spec.rollout, md.spec.pod
    pod_spec: dict[str, Any] = {
        "containers": [container(md, images)],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # the engine never talks to the API server
        "securityContext": pod_security.pod_security_context(),
        "volumes": [
            *model_mounts(md).volumes,
            *adapter_mounts(md).volumes,
            *pod_security.writable_volumes(str(pod.shm_size)),
            *(v.to_wire() for v in pod.volumes),
        ],
    }
    if init := init_containers(md, images):
        pod_spec["initContainers"] = init
    if res.node_selector:
        pod_spec["nodeSelector"] = dict(res.node_selector)
    if res.tolerations:
        pod_spec["tolerations"] = [t.to_wire() for t in res.tolerations]
    if res.affinity:
        pod_spec["affinity"] = res.affinity
    if pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [s.to_wire() for s in pod.image_pull_secrets]
    for key, value in (("serviceAccountName", pod.service_account_name), ("runtimeClassName", pod.runtime_class_name),
                       ("priorityClassName", pod.priority_class_name)):  # fmt: skip
        if value is not None:
            pod_spec[key] = value
    if pod.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = list(pod.topology_spread_constraints)
    template_meta: dict[str, Any] = {"labels": {**pod.labels, **labels(md)}}  # the selector's labels win
    if pod.annotations:
        template_meta["annotations"] = dict(pod.annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(md, deployment_name(md), uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(md)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable},
            },
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def replicas_patch(md: ModelDeployment, replicas: int) -> dict[str, Any]:
    """The apply body that sets only the replica count (applied under the replica field manager)."""
    if replicas < 0:
        raise ValueError(f"replicas must not be negative, got {replicas}")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(md), "namespace": md.metadata.namespace},
        "spec": {"replicas": replicas},
    }


def service(md: ModelDeployment, uid: str) -> dict[str, Any]:
    """The engines' Service: ``service.type``, or ClusterIP behind a router so that no client goes past it (the
    router's Service then takes the type; ``ModelDeploymentSpec.engine_service_type``)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(md, service_name(md), uid),
        "spec": {
            "type": md.spec.engine_service_type(),
            "selector": selector_labels(md),
            "ports": [{"name": HTTP_PORT_NAME, "port": md.spec.service.port, "targetPort": HTTP_PORT_NAME}],
        },
    }


def config_map(md: ModelDeployment, uid: str, budgets: Budgets) -> dict[str, Any]:
    """The engine's configuration: the budgets new pods start with, and the engine settings for reference."""
    engine = {
        "model": md.spec.model.describe(),
        "servedModelName": md.spec.model.resolved_served_name,
        "args": engine_args(md),
        "budgets": {SEQS_KEY: budgets.max_num_seqs, TOKENS_KEY: budgets.max_num_batched_tokens},
    }
    metadata = child_metadata(md, config_map_name(md), uid)
    metadata["annotations"] = {SPEC_BUDGET_ANNOTATION: _budget_text(md.spec.resolved_budgets())}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {
            SEQS_KEY: str(budgets.max_num_seqs),
            TOKENS_KEY: str(budgets.max_num_batched_tokens),
            ENGINE_CONFIG_KEY: json.dumps(engine, indent=2, sort_keys=True),
        },
    }


def budgets_from_config_map(data: dict[str, str] | None) -> Budgets | None:
    """The budgets recorded in the ConfigMap's data, or None when absent or unreadable."""
    if not data:
        return None
    try:
        return Budgets(int(data[SEQS_KEY]), int(data[TOKENS_KEY]))
    except (KeyError, ValueError):  # SettingError included: out of the contract's bounds
        return None


def _budget_text(budgets: Budgets) -> str:
    return f"{budgets.max_num_seqs}/{budgets.max_num_batched_tokens}"


def config_map_budgets(md: ModelDeployment, current: dict[str, Any] | None) -> Budgets:
    """The budgets the ConfigMap must hold now.

    A static budget is the spec's. With the tuner on, the tuned budgets already in the ConfigMap are kept
    (moved into the current bounds), unless the spec's own budget changed since they were derived from it:
    a user who sets the budget (``paged-ctl budget``) restarts the tuner from there.
    """
    static = starting_budgets(md.spec)
    tuner = controller_spec(md.spec).budget
    if tuner is None or current is None:
        return static
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    if annotations.get(SPEC_BUDGET_ANNOTATION) != _budget_text(md.spec.resolved_budgets()):
        return static
    tuned = budgets_from_config_map(current.get("data"))
    return tuner.clamp(tuned) if tuned is not None else static


def pod_disruption_budget(md: ModelDeployment, uid: str) -> dict[str, Any]:
    """One replica at a time may be evicted voluntarily (node drains make progress, capacity drops by one)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(md, pdb_name(md), uid),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(md)}},
    }


def admin_secret(md: ModelDeployment, uid: str, token: str) -> dict[str, Any]:
    """The admin token shared by the engines (env) and the operator (admin API calls); created once, never rotated
    by apply."""
    if len(token) < 16:
        raise ValueError(f"admin token must have at least 16 characters, got {len(token)}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(md, secret_name(md), uid),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }
