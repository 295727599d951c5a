"""`ModelDeployment.spec`: what the user asks for.

Every field has a default, so `spec: {}` is a useful object: one CPU replica serving the built-in
default model (Gemma 3 270M) with autoscaling between 1 and 1 replicas. Ranges are OpenAPI constraints;
rules that relate two fields are `@cel` rules (see `base`), enforced by the API server and by
pydantic alike.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from paged_platform.api.adapters import MAX_ADAPTERS, Adapter
from paged_platform.api.base import ApiModel, IntOrPercent, Quantity, cel
from paged_platform.api.model_source import DNS_SUBDOMAIN_PATTERN, ModelSource, SecretKeyRef, SecretRef
from paged_platform.engine_contract.budgets import (
    CPU_SERVING_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    LIVE_MAX_NUM_SEQS_FLOOR,
    MAX_NUM_BATCHED_TOKENS_BOUNDS,
    MAX_NUM_SEQS_BOUNDS,
    BudgetLimits,
    Budgets,
    resolve_budgets,
)
from paged_platform.engine_contract.memory import (
    DEFAULT_DESCRIPTION,
    KV_CACHE_MEMORY_PATTERN,
    MAX_TEXT_LENGTH,
    parse_kv_cache_memory,
)
from paged_platform.tracing_contract import DEFAULT_PROTOCOL, Exporter, OtlpProtocol

#: The images of this release: the defaults of the operator's `--engine-image` / `--router-image`, which say what an
#: unset `engine.image` / `router.image` means when the operator renders.
DEFAULT_ENGINE_IMAGE = "ghcr.io/paged/paged-engine:0.1.0"
#: `paged-router` ships in the operator image (the platform package without torch).
DEFAULT_ROUTER_IMAGE = "ghcr.io/paged/paged-operator:0.1.0"
RESOURCE_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
#: Pod volumes the operator names itself (``pod.volumes`` may not reuse them).
RESERVED_VOLUMES = ("model", "model-cache", "cache", "tmp", "dshm")
#: ...and every name with this prefix (the adapters' volumes and their download cache).
RESERVED_VOLUME_PREFIX = "adapter-"


def _sub(model: type[ApiModel]) -> Any:
    """A nested object defaulted to its own defaults, spelled out in the schema too: the API server checks a
    default against the object's CEL rules without filling in the nested defaults first, so `{}` is refused."""
    return Field(default_factory=model, json_schema_extra={"default": model().to_wire()})


#: A replica's start-up budget by device when ``engine.startupTimeoutSeconds`` is unset: a GPU replica also waits
#: for its larger weights and its CUDA graphs.
DEFAULT_STARTUP_TIMEOUT_S = {"cpu": 600, "gpu": 1800}


def _kv_cache_memory(value: Any) -> int | str:
    if isinstance(value, float):  # `0.9` unquoted in YAML: the text the API server takes for it
        value = repr(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("kv_cache_memory", "kvCacheMemory must be a size like '2Gi' or a fraction like '0.9'")
    if isinstance(value, int) and value < 2:
        raise PydanticCustomError(
            "kv_cache_memory", f"kvCacheMemory {value} as an integer is bytes; write a fraction quoted, like '0.9'"
        )
    if isinstance(value, str) and not re.match(KV_CACHE_MEMORY_PATTERN, value):
        raise PydanticCustomError(
            "kv_cache_memory",
            f"kvCacheMemory {value!r} is neither a size (like '2Gi', '512Mi' or a byte count) nor a fraction of free "
            "device memory in (0, 1] (like '0.9')",
        )
    try:
        parse_kv_cache_memory(value)
    except ValueError as exc:
        raise PydanticCustomError("kv_cache_memory", str(exc)) from None
    return value


KvCacheMemory = Annotated[
    int | str,
    BeforeValidator(_kv_cache_memory),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "minimum": 2,
            "pattern": KV_CACHE_MEMORY_PATTERN,
            "maxLength": MAX_TEXT_LENGTH,
        }
    ),
]
"""A KV-cache budget as the engine contract writes it: bytes (integer or quantity) or a fraction (string)."""


class EngineSpec(ApiModel):
    """How each replica's engine runs."""

    image: str | None = Field(None, min_length=1, max_length=512)
    """Engine container image; unset: the operator's engine image (its `--engine-image`, the chart's `images.engine`,
    by default its own release's), resolved each time it renders, not stored, so an operator upgrade rolls the
    engines onto its matching image."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weight and activation dtype; `auto` picks float32 on CPU and bfloat16 on GPU."""
    block_size: Literal[8, 16, 32, 64, 128] = 16
    """Tokens per KV-cache block."""
    max_model_len: int | None = Field(None, ge=16, le=1_048_576)
    """Longest sequence (prompt + output) in tokens; unset means the model's own limit."""
    kv_cache_memory: KvCacheMemory | None = Field(
        None,
        description="Memory carved into KV-cache blocks at start-up: a size (like `2Gi`) or a fraction of the "
        'device\'s free memory after the weights, quoted (like `"0.9"`); unset: the engine sizes it for its device '
        f"({DEFAULT_DESCRIPTION}).",
    )
    enable_prefix_caching: bool = True
    """Reuse KV blocks across requests that share a prompt prefix."""
    max_lora_rank: int = Field(16, ge=1, le=1024)
    """Highest LoRA rank among `spec.adapters` (the width of the engine's adapter weight slots)."""
    startup_timeout_seconds: int | None = Field(
        None,
        ge=30,
        le=86_400,
        description="How long an engine may take from start to serving (`/ready`: the model loaded) before the "
        "kubelet restarts it, so a hung load is retried; unset: "
        + ", ".join(f"{s} s on a {d.upper()}" for d, s in DEFAULT_STARTUP_TIMEOUT_S.items())
        + " (raise it for a large model read from slow storage).",
    )
    extra_args: list[str] = Field(default_factory=list, max_length=64, json_schema_extra={"default": []})
    """Further `paged-engine serve` arguments, passed as written."""


class Toleration(ApiModel):
    """A Kubernetes toleration, as in a Pod spec."""

    key: str | None = Field(None, max_length=316)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class ResourcesSpec(ApiModel):
    """Compute for one replica, and where it may be scheduled."""

    cpu: Quantity = "2"
    """CPU request per replica."""
    memory: Quantity = "4Gi"
    """Memory request and limit per replica."""
    gpus: int = Field(0, ge=0, le=16)
    """GPUs per replica (request and limit of `gpuResourceName`); 0 runs on CPU."""
    gpu_resource_name: str = Field("nvidia.com/gpu", max_length=253, pattern=RESOURCE_NAME_PATTERN)
    """Extended resource that counts GPUs on the nodes (e.g. `amd.com/gpu`)."""
    node_selector: dict[str, str] = Field(default_factory=dict, json_schema_extra={"default": {}})
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, json_schema_extra={"default": []})
    affinity: dict[str, Any] | None = None
    """A Kubernetes Pod affinity, passed through unchanged."""


class ReplicasSpec(ApiModel):
    """Replica bounds. Autoscaling moves the count inside them; without it the operator runs `min`.

    The `scale` subresource (`kubectl scale`) writes `min`.
    """

    min: int = Field(1, ge=0, le=1000)
    max: int = Field(1, ge=1, le=1000)

    @cel("self.min <= self.max", "replicas.min must not exceed replicas.max", field_path=".min")
    def _min_le_max(self) -> bool:
        return self.min <= self.max


class AutoscalingTargets(ApiModel):
    """Per-replica averages the autoscaler keeps replicas under; crossing any one scales up."""

    kv_cache_usage: float = Field(0.75, gt=0, le=1)
    """Fraction of KV-cache blocks in use."""
    waiting_per_replica: float = Field(4, gt=0, le=10_000)
    """Requests waiting in the scheduler queue."""
    preemption_rate: float = Field(0.5, gt=0, le=10_000)
    """Recompute preemptions per second."""
    ttft_p95_seconds: float | None = Field(None, gt=0, le=600)
    """Optional service level: 95th-percentile time to first token."""


class ScaleUpPolicy(ApiModel):
    """How fast replicas are added."""

    stabilization_window_seconds: int = Field(30, ge=0, le=3600)
    """How long the signals must ask for more replicas before replicas are added (not while the queue grows)."""
    max_step: int = Field(4, ge=1, le=100)
    """Most replicas added in one decision; while the queue grows, up to the current count (doubling)."""


class ScaleDownPolicy(ApiModel):
    """How fast replicas are removed; slower than up by default, since a cold replica costs a model load."""

    stabilization_window_seconds: int = Field(300, ge=0, le=3600)
    """How long the signals must allow fewer replicas before replicas are removed."""
    max_step: int = Field(1, ge=1, le=100)
    """Most replicas removed in one decision."""


class AutoscalingSpec(ApiModel):
    """The operator's autoscaler."""

    enabled: bool = True
    dry_run: bool = False
    """Decide and report (status.decisions, events) without changing the replica count."""
    interval_seconds: int = Field(15, ge=5, le=600)
    """How often metrics are read and a decision is made."""
    idle_seconds: int = Field(300, ge=30, le=86400)
    """With `replicas.min: 0` and `router.enabled`: scale to zero after this long without requests (the router
    then holds new requests while the operator scales back to one replica)."""
    targets: AutoscalingTargets = _sub(AutoscalingTargets)
    scale_up: ScaleUpPolicy = _sub(ScaleUpPolicy)
    scale_down: ScaleDownPolicy = _sub(ScaleDownPolicy)


class _Bounds(ApiModel):
    """An inclusive range; subclasses give the defaults."""

    min: int
    max: int

    @cel("self.min <= self.max", "bounds: min must not exceed max", field_path=".min")
    def _ordered(self) -> bool:
        return self.min <= self.max


class SeqsBounds(_Bounds):
    """Range the tuner may move `maxNumSeqs` in."""

    min: int = Field(1, ge=MAX_NUM_SEQS_BOUNDS.low, le=MAX_NUM_SEQS_BOUNDS.high)
    max: int = Field(LIVE_MAX_NUM_SEQS_FLOOR, ge=MAX_NUM_SEQS_BOUNDS.low, le=MAX_NUM_SEQS_BOUNDS.high)


class BatchedTokensBounds(_Bounds):
    """Range the tuner may move `maxNumBatchedTokens` in."""

    min: int = Field(256, ge=MAX_NUM_BATCHED_TOKENS_BOUNDS.low, le=MAX_NUM_BATCHED_TOKENS_BOUNDS.high)
    max: int = Field(16384, ge=MAX_NUM_BATCHED_TOKENS_BOUNDS.low, le=MAX_NUM_BATCHED_TOKENS_BOUNDS.high)


class AdaptiveBudget(ApiModel):
    """Let the operator's budget tuner move the scheduler budget inside bounds (the engines are started with live
    limits that admit them)."""

    enabled: bool = False
    max_num_seqs: SeqsBounds = _sub(SeqsBounds)
    max_num_batched_tokens: BatchedTokensBounds = _sub(BatchedTokensBounds)

    @cel(
        "!self.enabled || self.maxNumBatchedTokens.max >= self.maxNumSeqs.min",
        "schedulerBudget.adaptive.maxNumBatchedTokens.max must be at least adaptive.maxNumSeqs.min (each sequence "
        "needs a token per step)",
        field_path=".maxNumBatchedTokens.max",
    )
    def _tokens_cover_seqs(self) -> bool:
        return not self.enabled or self.max_num_batched_tokens.max >= self.max_num_seqs.min

    def ceiling(self) -> BudgetLimits | None:
        """The highest budgets the tuner may set; None when it is off."""
        if not self.enabled:
            return None
        return BudgetLimits(self.max_num_seqs.max, self.max_num_batched_tokens.max)


class SchedulerBudget(ApiModel):
    """The engine scheduler's per-step budget; the starting point when `adaptive` is on. Unset values take the
    engine's own defaults (the engine contract's rule)."""

    max_num_seqs: int | None = Field(
        None, ge=MAX_NUM_SEQS_BOUNDS.low, le=MAX_NUM_SEQS_BOUNDS.high,
        description=f"Most sequences in one engine step; unset: {DEFAULT_MAX_NUM_SEQS}, or maxNumBatchedTokens if "
        "lower.",
    )  # fmt: skip
    max_num_batched_tokens: int | None = Field(
        None, ge=MAX_NUM_BATCHED_TOKENS_BOUNDS.low, le=MAX_NUM_BATCHED_TOKENS_BOUNDS.high,
        description=f"Most tokens (prefill + decode) in one engine step; unset: the engine's rule for its device, "
        f"{CPU_SERVING_MAX_NUM_BATCHED_TOKENS} on a CPU and {DEFAULT_MAX_NUM_BATCHED_TOKENS} on a GPU, or maxNumSeqs "
        "if higher.",
    )  # fmt: skip
    adaptive: AdaptiveBudget = _sub(AdaptiveBudget)

    def resolve(self, device_type: str) -> Budgets:
        """The budgets an engine on ``device_type`` (``cpu``, ``cuda``) starts with from this spec."""
        return resolve_budgets(self.max_num_seqs, self.max_num_batched_tokens, device_type=device_type, serving=True)

    @cel(
        "!has(self.maxNumSeqs) || !has(self.maxNumBatchedTokens) || self.maxNumBatchedTokens >= self.maxNumSeqs",
        "schedulerBudget.maxNumBatchedTokens must be at least maxNumSeqs (each sequence needs a token per step)",
        field_path=".maxNumBatchedTokens",
    )
    def _tokens_cover_seqs(self) -> bool:
        seqs, tokens = self.max_num_seqs, self.max_num_batched_tokens
        return seqs is None or tokens is None or tokens >= seqs

    @cel(
        "!self.adaptive.enabled || !has(self.maxNumSeqs) || (self.maxNumSeqs >= self.adaptive.maxNumSeqs.min"
        " && self.maxNumSeqs <= self.adaptive.maxNumSeqs.max)",
        "schedulerBudget.maxNumSeqs must lie within adaptive.maxNumSeqs bounds",
        field_path=".maxNumSeqs",
    )
    def _seqs_in_bounds(self) -> bool:
        bounds, seqs = self.adaptive.max_num_seqs, self.max_num_seqs
        return not self.adaptive.enabled or seqs is None or bounds.min <= seqs <= bounds.max

    @cel(
        "!self.adaptive.enabled || !has(self.maxNumBatchedTokens)"
        " || (self.maxNumBatchedTokens >= self.adaptive.maxNumBatchedTokens.min"
        " && self.maxNumBatchedTokens <= self.adaptive.maxNumBatchedTokens.max)",
        "schedulerBudget.maxNumBatchedTokens must lie within adaptive.maxNumBatchedTokens bounds",
        field_path=".maxNumBatchedTokens",
    )
    def _tokens_in_bounds(self) -> bool:
        bounds, tokens = self.adaptive.max_num_batched_tokens, self.max_num_batched_tokens
        return not self.adaptive.enabled or tokens is None or bounds.min <= tokens <= bounds.max


class RolloutSpec(ApiModel):
    """Rolling-update settings of the child Deployment."""

    max_surge: IntOrPercent = 1
    max_unavailable: IntOrPercent = 0

    @cel(
        "!(string(self.maxSurge) in ['0', '0%'] && string(self.maxUnavailable) in ['0', '0%'])",
        "rollout.maxSurge and rollout.maxUnavailable cannot both be zero",
    )
    def _can_progress(self) -> bool:
        return not (str(self.max_surge) in ("0", "0%") and str(self.max_unavailable) in ("0", "0%"))


ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]


class ServiceSpec(ApiModel):
    """The Service clients reach (OpenAI- and Anthropic-compatible API): the engines' own, or the router's while
    `router.enabled` (the engines' Service is then always ClusterIP, reachable only inside the cluster, so no
    client bypasses the router)."""

    port: int = Field(8000, ge=1, le=65535)
    type: ServiceType = Field(
        "ClusterIP",
        description="The type of the Service clients reach: the engines' Service, or with `router.enabled` the "
        "router's (unless `router.service.type` sets it), the engines' Service then being ClusterIP.",
    )


class RouterServiceSpec(ApiModel):
    """The router's Service, `<name>-router`, on `service.port`."""

    type: ServiceType | None = Field(
        None, description="The router Service's type; unset: `service.type`, the type of the Service clients reach."
    )


class RouterRequests(ApiModel):
    """What the router container is guaranteed."""

    cpu: Quantity = "500m"
    """Proxying, SSE relaying and prompt hashing; raise it with the request rate."""
    memory: Quantity = "512Mi"
    """About 100 MiB for the process plus about 27 MiB per engine replica whose prefix index is full (200,000
    chunk hashes each, `cache_aware` and `prefix` only): room for about 14 full indexes."""


class RouterLimits(ApiModel):
    """What the router container may use at most."""

    cpu: Quantity | None = None
    """Unset: no CPU limit, since throttling would stall every stream the router relays."""
    memory: Quantity = "1Gi"
    """Room for about 30 engine replicas' full prefix indexes; add about 30 MiB per replica beyond that."""


class RouterResources(ApiModel):
    """The router container's requests and limits (a Pod's `resources`, cpu and memory only)."""

    requests: RouterRequests = _sub(RouterRequests)
    limits: RouterLimits = _sub(RouterLimits)


class RouterSpec(ApiModel):
    """An optional `paged-router` in front of the replicas: prefix- and load-aware placement of each request,
    replicas discovered from the engines' EndpointSlices (docs/router.md). Its Service is `<name>-router`."""

    enabled: bool = False
    #: The routing policy (`paged-router --policy`).
    policy: Literal["cache_aware", "prefix", "least_load", "round_robin", "session"] = "cache_aware"
    replicas: int = Field(1, ge=1, le=100)
    image: str | None = Field(None, min_length=1, max_length=512)
    """Router container image; unset: the operator's router image (its `--router-image`, by default the operator's own
    image), resolved when it renders, like `engine.image`."""
    env: list[dict[str, Any]] = Field(default_factory=list, max_length=256, json_schema_extra={"default": []})
    """Environment variables of the router container, as in a Pod spec (like `OTEL_EXPORTER_OTLP_HEADERS` from a
    Secret); where `tracing` sets the same name, this value wins."""
    queue_timeout_seconds: int | None = Field(
        None,
        ge=1,
        le=86_400,
        description="How long a request may wait for a replica with room (`paged-router --queue-timeout`) before "
        "it is answered 503 with Retry-After; unset: the engines' start-up budget (`engine.startupTimeoutSeconds`, "
        + ", ".join(f"{s} s on a {d.upper()}" for d, s in DEFAULT_STARTUP_TIMEOUT_S.items())
        + "), so a request arriving while the fleet is at zero outlasts a cold start (scheduling, image pull, model "
        "load). A client that gives up first frees its place at once.",
    )
    resources: RouterResources = _sub(RouterResources)
    service: RouterServiceSpec = _sub(RouterServiceSpec)


class NetworkPolicySpec(ApiModel):
    """An opt-in NetworkPolicy `<name>` on the engine pods: only this ModelDeployment's router, the operator (its
    metrics reads and admin calls) and Prometheus (as the operator's chart identifies it) reach them, and the
    admin port only from the operator. Takes effect where the cluster's network plugin enforces NetworkPolicies."""

    enabled: bool = False
    allow_from: list[dict[str, Any]] = Field(default_factory=list, max_length=32, json_schema_extra={"default": []})
    """Further peers that may reach the engines' API port, as in a NetworkPolicy's `from` (`podSelector`,
    `namespaceSelector`, `ipBlock`): the clients of engines that no router fronts, an ingress gateway."""


class TracingSpec(ApiModel):
    """OpenTelemetry traces of the engines and the router, rendered into both alike: `--otel-exporter` and the
    standard `OTEL_*` variables (docs/observability.md#tracing). A variable of the same name in `pod.env` (the
    engines) or `router.env` (the router) wins over the one this sets."""

    exporter: Exporter = "off"
    """`off`, `console` (spans printed to the container's log) or `otlp` (sent to `endpoint`)."""
    endpoint: str | None = Field(None, max_length=2048, pattern=r"^https?://\S+$")
    """The collector's OTLP base URL, like `http://otel-collector.observability:4318`; required with `otlp`. For
    `http/protobuf`, `/v1/traces` is appended."""
    protocol: OtlpProtocol = DEFAULT_PROTOCOL
    """`http/protobuf` (port 4318 by convention) or `grpc` (4317)."""
    sampling_ratio: float = Field(1.0, ge=0, le=1)
    """The share of the traces started here that are recorded. Parent-based: a request that arrives with a trace
    context follows its sampled flag."""

    @cel(
        "self.exporter != 'otlp' || has(self.endpoint)",
        "tracing.endpoint is required when tracing.exporter is otlp (the collector's URL)",
        field_path=".endpoint",
    )
    def _otlp_has_endpoint(self) -> bool:
        return self.exporter != "otlp" or self.endpoint is not None


class NamedObject(ApiModel):
    """A Kubernetes object passed through as written (a Volume, a VolumeMount): only its `name` is read here, the
    API server checks the rest when the Deployment is applied."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=253)


class PodSettings(ApiModel):
    """What the engine pods get besides what the operator sets: passed through to the pod template as written.

    The operator's own settings win where both name the same thing (the selector labels, the engine's ports).
    Free-form entries (`env`, `volumes`, ...) are Kubernetes' own types and are checked by the API server when
    the Deployment is applied; a refusal shows in the ModelDeployment's events.
    """

    annotations: dict[str, str] = Field(default_factory=dict, json_schema_extra={"default": {}})
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra={"default": {}})
    env: list[dict[str, Any]] = Field(default_factory=list, max_length=256, json_schema_extra={"default": []})
    """Environment variables of the engine (and the model download) container, as in a Pod spec."""
    env_from: list[dict[str, Any]] = Field(default_factory=list, max_length=64, json_schema_extra={"default": []})
    image_pull_secrets: list[SecretRef] = Field(default_factory=list, max_length=32,
                                                json_schema_extra={"default": []})  # fmt: skip
    """Secrets holding credentials for a private registry (`[{name: regcred}]`, as in a Pod spec)."""
    service_account_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    runtime_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Like `nvidia`, where the GPU runtime is a RuntimeClass."""
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list, max_length=16, json_schema_extra={"default": []}
    )
    volumes: list[NamedObject] = Field(default_factory=list, max_length=64, json_schema_extra={"default": []})
    """Extra pod volumes; mount them with `volumeMounts`."""
    volume_mounts: list[NamedObject] = Field(default_factory=list, max_length=64, json_schema_extra={"default": []})
    """Extra mounts in the engine container."""
    shm_size: Quantity = "1Gi"
    """Size of `/dev/shm` (a memory-backed emptyDir; counts against the pod's memory)."""

    @cel(
        f"self.volumes.all(v, !(v.name in {list(RESERVED_VOLUMES)}) && !v.name.startsWith('{RESERVED_VOLUME_PREFIX}'))",
        "pod.volumes: the names model, model-cache, cache, tmp, dshm and adapter-* are the operator's own",
    )
    def _own_volume_names(self) -> bool:
        return not any(v.name in RESERVED_VOLUMES or v.name.startswith(RESERVED_VOLUME_PREFIX) for v in self.volumes)


class AuthSpec(ApiModel):
    """Access to the OpenAI-compatible API."""

    api_key_secret_ref: SecretKeyRef | None = None
    """A Secret key holding the API key clients send as `Authorization: Bearer KEY`; unset means no key. The key
    reaches the engine as an environment variable from the Secret, never through the ConfigMap or arguments."""


class ModelDeploymentSpec(ApiModel):
    """A model served by a set of engine replicas that the operator sizes and tunes."""

    model: ModelSource = _sub(ModelSource)
    adapters: list[Adapter] = Field(default_factory=list, max_length=MAX_ADAPTERS, json_schema_extra={"default": []})
    """LoRA adapters of the model, loaded into every replica; each is a model name clients select."""
    engine: EngineSpec = _sub(EngineSpec)
    resources: ResourcesSpec = _sub(ResourcesSpec)
    replicas: ReplicasSpec = _sub(ReplicasSpec)
    autoscaling: AutoscalingSpec = _sub(AutoscalingSpec)
    scheduler_budget: SchedulerBudget = _sub(SchedulerBudget)
    rollout: RolloutSpec = _sub(RolloutSpec)
    service: ServiceSpec = _sub(ServiceSpec)
    router: RouterSpec = _sub(RouterSpec)
    network_policy: NetworkPolicySpec = _sub(NetworkPolicySpec)
    tracing: TracingSpec = _sub(TracingSpec)
    pod: PodSettings = _sub(PodSettings)
    auth: AuthSpec = _sub(AuthSpec)

    @property
    def device_type(self) -> str:
        """``cuda`` when the replicas ask for GPUs, else ``cpu``: what the engine's per-device defaults depend on."""
        return "cuda" if self.resources.gpus > 0 else "cpu"

    def resolved_startup_timeout_s(self) -> int:
        """How long a replica may take to serve before it is restarted (``engine.startupTimeoutSeconds``)."""
        given = self.engine.startup_timeout_seconds
        return given if given is not None else DEFAULT_STARTUP_TIMEOUT_S["gpu" if self.resources.gpus else "cpu"]

    def resolved_router_queue_timeout_s(self) -> int:
        """How long the router holds a request (``router.queueTimeoutSeconds``): unset, a replica's start-up
        budget, the longest a request arriving at zero replicas may have to wait."""
        given = self.router.queue_timeout_seconds
        return given if given is not None else self.resolved_startup_timeout_s()

    def router_service_type(self) -> str:
        """The router Service's type: ``router.service.type``, else ``service.type``."""
        return self.router.service.type or self.service.type

    def engine_service_type(self) -> str:
        """ClusterIP behind a router (clients go through it), else ``service.type``."""
        return "ClusterIP" if self.router.enabled else self.service.type

    def served_model_names(self) -> list[str]:
        """Every model name the replicas will serve: the base model's, then each adapter's."""
        return [self.model.resolved_served_name, *(a.name for a in self.adapters)]

    def resolved_budgets(self) -> Budgets:
        """The spec's budgets with the unset ones filled in by the engine's rule for this device (before the
        operator moves them into the tuner's bounds: ``paged_operator.policy.config.starting_budgets``)."""
        return self.scheduler_budget.resolve(self.device_type)

    @cel("self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))",
         "spec.adapters: every adapter needs a name of its own")  # fmt: skip
    def _unique_adapter_names(self) -> bool:
        names = [a.name for a in self.adapters]
        return len(set(names)) == len(names)
