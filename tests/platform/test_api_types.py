"""The ModelDeployment types: examples, defaults, each cross-field rule in Python and in CEL, status helpers."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_platform.api import (
    MAX_DECISIONS,
    ApiModel,
    ConditionType,
    Decision,
    DecisionState,
    HuggingFaceModel,
    ModelDeployment,
    ModelDeploymentSpec,
    ModelDeploymentStatus,
    ModelSource,
    PathModel,
    parse_quantity,
)
from paged_platform.api.spec import ReplicasSpec, RolloutSpec, SchedulerBudget, TracingSpec
from paged_platform.crd import openapi_schema, to_structural
from pydantic import ValidationError

from conftest import ADAPTERS_REFUSED, MODEL_SOURCE_REFUSED, MODEL_SOURCES, apply_defaults, cel_holds


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("name", ["modeldeployment-cpu.yaml", "modeldeployment-gpu.yaml"])
def test_examples_validate(examples_dir: Path, name: str) -> None:
    md = ModelDeployment.model_validate(load(examples_dir / name))
    assert md.spec.replicas.min <= md.spec.replicas.max


def test_example_contents(examples_dir: Path) -> None:
    cpu = ModelDeployment.model_validate(load(examples_dir / "modeldeployment-cpu.yaml"))
    assert cpu.spec.model.is_default and cpu.spec.resources.gpus == 0
    assert cpu.spec.model.resolved_served_name == "gemma-3-270m"
    gpu = ModelDeployment.model_validate(load(examples_dir / "modeldeployment-gpu.yaml"))
    assert gpu.spec.model.is_path and gpu.spec.resources.gpus == 1
    source = gpu.spec.model.resolved()
    assert isinstance(source, PathModel) and source.claim_name == gpu.spec.model.volume.claim_name
    assert gpu.spec.scheduler_budget.adaptive.enabled


def test_minimal_object_is_useful() -> None:
    md = ModelDeployment.model_validate(
        {"apiVersion": "paged.dev/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": "m"}}
    )
    spec = md.spec
    assert spec.model.name == "default" and spec.model.resolved_served_name == "gemma-3-270m"
    assert (spec.replicas.min, spec.replicas.max) == (1, 1)
    start = spec.resolved_budgets()  # unset budgets: the engine contract's rule for a CPU server
    assert (start.max_num_seqs, start.max_num_batched_tokens) == (128, 512)
    assert spec.service.port == 8000


def test_the_router_fields_are_camel_case_on_the_wire_and_their_defaults_fit_a_cold_start() -> None:
    wire = {"router": {"queueTimeoutSeconds": 90, "service": {"type": "NodePort"},
                       "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}}}  # fmt: skip
    router = ModelDeploymentSpec.model_validate(wire).router
    assert (router.queue_timeout_seconds, router.service.type) == (90, "NodePort")
    assert (router.resources.requests.cpu, router.resources.requests.memory) == ("1", "512Mi")
    assert (router.resources.limits.cpu, router.resources.limits.memory) == (None, "2Gi")
    assert ModelDeploymentSpec.model_validate(wire).to_wire()["router"]["queueTimeoutSeconds"] == 90
    gpu = ModelDeploymentSpec.model_validate({"resources": {"gpus": 1}})
    assert gpu.router.queue_timeout_seconds is None and gpu.resolved_router_queue_timeout_s() == 1800
    assert gpu.router_service_type() == gpu.engine_service_type() == "ClusterIP"


def test_snake_and_camel_names_both_accepted() -> None:
    assert ReplicasSpec.model_validate({"min": 2, "max": 3}) == ReplicasSpec(min=2, max=3)
    assert SchedulerBudget(max_num_seqs=8).to_wire()["maxNumSeqs"] == 8


def test_served_name_derivation() -> None:
    assert ModelSource(name="Qwen/Qwen2.5-0.5B").resolved_served_name == "Qwen2.5-0.5B"
    path = ModelSource.model_validate({"name": "/m/llama/", "volume": {"claimName": "w", "mountPath": "/m"}})
    assert path.resolved_served_name == "llama"
    assert ModelSource(name="a/b", served_name="x").resolved_served_name == "x"
    cached = ModelSource.model_validate({"name": "a/b", "volume": {"claimName": "cache"}})
    assert cached.resolved() == HuggingFaceModel(id="a/b") and cached.resolved_cache().claim_name == "cache"


INVALID = [
    ({"replicas": {"min": 3, "max": 2}}, "replicas.min must not exceed replicas.max"),
    ({"schedulerBudget": {"maxNumSeqs": 512, "maxNumBatchedTokens": 256}}, "must be at least maxNumSeqs"),
    (
        {"schedulerBudget": {"maxNumSeqs": 300, "adaptive": {"enabled": True}}},
        "maxNumSeqs must lie within adaptive.maxNumSeqs bounds",
    ),
    (
        {
            "schedulerBudget": {
                "maxNumBatchedTokens": 2048,
                "adaptive": {"enabled": True, "maxNumBatchedTokens": {"min": 4096}},
            }
        },
        "maxNumBatchedTokens must lie within adaptive.maxNumBatchedTokens bounds",
    ),
    ({"schedulerBudget": {"adaptive": {"maxNumSeqs": {"min": 9, "max": 8}}}}, "bounds: min must not exceed max"),
    (
        {
            "schedulerBudget": {
                "adaptive": {"enabled": True, "maxNumSeqs": {"min": 64}, "maxNumBatchedTokens": {"min": 16, "max": 32}}
            }
        },
        "adaptive.maxNumBatchedTokens.max must be at least adaptive.maxNumSeqs.min",
    ),
    ({"rollout": {"maxSurge": "0%", "maxUnavailable": 0}}, "cannot both be zero"),
    ({"model": {"name": "/models/x"}}, "model.volume must name the PersistentVolumeClaim"),
    ({"model": {"name": "/data/x", "volume": {"claimName": "w"}}}, "path under model.volume.mountPath"),
    ({"model": {"volume": {"claimName": "w"}}}, "takes no model.volume"),
    ({"autoscaling": {"targets": {"kvCacheUsage": 1.5}}}, "less than or equal to 1"),
    ({"autoscaling": {"targets": {"waitingPerReplica": 0}}}, "greater than 0"),
    ({"engine": {"kvCacheMemory": "2 GB"}}, "neither a size"),
    ({"engine": {"kvCacheMemory": "0"}}, "neither a size"),
    ({"engine": {"kvCacheMemory": "1.5"}}, "neither a size"),
    ({"engine": {"kvCacheMemory": "500m"}}, "neither a size"),
    ({"engine": {"kvCacheMemory": 1}}, "write a fraction quoted"),
    ({"engine": {"blockSize": 24}}, "Input should be 8, 16, 32, 64 or 128"),
    ({"resources": {"memory": -5}}, "must not be negative"),
    ({"rollout": {"maxSurge": "ten"}}, "neither an integer nor a percentage"),
    ({"model": {"name": "not a model"}}, "should match pattern"),
    ({"replicas": {"mn": 1}}, "Extra inputs are not permitted"),
    ({"model": {"name": "/models/x", "volume": {"claimName": "w", "mountPath": "/models/"}}}, "should match pattern"),
    ({"resources": {"gpuResourceName": "nvidia.com/gpu type"}}, "should match pattern"),
    ({"tracing": {"exporter": "otlp"}}, "tracing.endpoint is required when tracing.exporter is otlp"),
    ({"tracing": {"exporter": "otlp", "endpoint": "otel-collector:4317"}}, r"tracing.endpoint\n.*should match pattern"),
    ({"tracing": {"samplingRatio": 1.5}}, r"tracing.samplingRatio\n.*less than or equal to 1"),
    ({"tracing": {"protocol": "http/json"}}, r"tracing.protocol\n.*Input should be 'grpc' or 'http/protobuf'"),
    ({"tracing": {"exporter": "jaeger"}}, r"tracing.exporter\n.*Input should be 'off', 'console' or 'otlp'"),
    ({"router": {"queueTimeoutSeconds": 0}}, r"router.queueTimeoutSeconds\n.*greater than or equal to 1"),
    ({"router": {"queueTimeoutSeconds": 86401}}, r"router.queueTimeoutSeconds\n.*less than or equal to 86400"),
    ({"router": {"service": {"type": "ExternalName"}}}, r"router.service.type\n.*'ClusterIP', 'NodePort' or"),
    ({"router": {"resources": {"limits": {"memory": "lots"}}}}, r"router.resources.limits.memory\n"),
    ({"router": {"resources": {"requests": {"gpu": 1}}}}, r"router.resources.requests.gpu\n.*Extra inputs"),
]


@pytest.mark.parametrize(("spec", "message"), INVALID)
def test_invalid_specs_are_refused_with_a_clear_message(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelDeploymentSpec.model_validate(spec)


@pytest.mark.parametrize("name", ["Model", "1abc", "a_b", "-a", "a" * 64])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="DNS-1035 label"):
        ModelDeployment.model_validate({"metadata": {"name": name}})


def cel_verdict(schema: dict[str, Any], value: Any) -> bool:
    """Every CEL rule in ``schema`` (nested ones included) holds on ``value``."""
    if not isinstance(value, dict):
        return True
    if not all(cel_holds(rule["rule"], value) for rule in schema.get("x-kubernetes-validations", [])):
        return False
    return all(cel_verdict(sub, value[name]) for name, sub in schema.get("properties", {}).items() if name in value)


@functools.cache
def structural(model: type[ApiModel]) -> dict[str, Any]:
    return to_structural(model.model_json_schema(by_alias=True))


def agree(model: type[ApiModel], wire: dict[str, Any]) -> None:
    """Python's verdict on ``wire`` equals the CRD's CEL rules' verdict on the server-defaulted ``wire``."""
    schema = structural(model)
    defaulted = apply_defaults(schema, wire)
    cel_ok = cel_verdict(schema, defaulted)
    try:
        model.model_validate(wire)
        python_ok = True
    except ValidationError as exc:
        assert all(e["type"] == "cel_rule" for e in exc.errors()), exc  # inputs below respect field ranges
        python_ok = False
    assert python_ok == cel_ok, (wire, defaulted)


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(0, 1000), hi=st.integers(1, 1000))
def test_replicas_rule_agrees_with_cel(lo: int, hi: int) -> None:
    agree(ReplicasSpec, {"min": lo, "max": hi})


seqs = st.integers(1, 4096)
tokens = st.integers(16, 1 << 20)


@settings(max_examples=80, deadline=None)
@given(
    budget=st.fixed_dictionaries(
        {},
        optional={
            "maxNumSeqs": seqs,
            "maxNumBatchedTokens": tokens,
            "adaptive": st.fixed_dictionaries(
                {},
                optional={
                    "enabled": st.booleans(),
                    "maxNumSeqs": st.fixed_dictionaries({}, optional={"min": seqs, "max": seqs}),
                    "maxNumBatchedTokens": st.fixed_dictionaries({}, optional={"min": tokens, "max": tokens}),
                },
            ),
        },
    )
)
def test_budget_rules_agree_with_cel(budget: dict[str, Any]) -> None:
    agree(SchedulerBudget, budget)


surge = st.sampled_from([0, 1, 3, "0%", "25%", "100%"])


@settings(max_examples=40, deadline=None)
@given(rollout=st.fixed_dictionaries({}, optional={"maxSurge": surge, "maxUnavailable": surge}))
def test_rollout_rule_agrees_with_cel(rollout: dict[str, Any]) -> None:
    agree(RolloutSpec, rollout)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["default", "Qwen/Qwen2.5-0.5B", "/models/q", "/data/q", "/models", "/modelsx/q"]),
    volume=st.none()
    | st.fixed_dictionaries({"claimName": st.just("w")}, optional={"mountPath": st.sampled_from(["/models", "/data"])}),
)
def test_model_rules_agree_with_cel(name: str, volume: dict[str, Any] | None) -> None:
    agree(ModelSource, {"name": name} | ({"volume": volume} if volume is not None else {}))


@settings(max_examples=20, deadline=None)
@given(
    exporter=st.sampled_from(["off", "console", "otlp", None]),
    endpoint=st.sampled_from(["http://otel-collector.observability:4318", None]),
)
def test_tracing_rule_agrees_with_cel(exporter: str | None, endpoint: str | None) -> None:
    agree(TracingSpec, {k: v for k, v in (("exporter", exporter), ("endpoint", endpoint)) if v is not None})


@settings(max_examples=60, deadline=None)
@given(name=st.text(alphabet="abz09-_A", min_size=1, max_size=70))
def test_name_rule_agrees_with_cel(name: str) -> None:
    agree(ModelDeployment, {"metadata": {"name": name}})


def test_quantities() -> None:
    assert parse_quantity("4Gi") == 4 * 2**30
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("2") == 2.0 and parse_quantity(3) == 3.0
    assert parse_quantity("1.5k") == 1500.0 and parse_quantity("1e3") == 1000.0
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("4GB")


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_set_condition_moves_transition_time_only_on_status_change() -> None:
    status = ModelDeploymentStatus()
    assert status.set_condition(ConditionType.READY, "False", "Starting", "loading", now=T0, observed_generation=1)
    later = T0 + timedelta(minutes=1)
    assert status.set_condition(ConditionType.READY, "False", "Starting", "still loading", now=later)
    ready = status.condition("Ready")
    assert ready is not None and ready.last_transition_time == T0 and ready.message == "still loading"
    assert not status.set_condition(ConditionType.READY, "False", "Starting", "still loading", now=later)
    assert status.set_condition(ConditionType.READY, "True", "Ready", "2/2 ready", now=later)
    assert status.condition(ConditionType.READY).last_transition_time == later
    assert [c.type for c in status.conditions] == ["Ready"]


def test_decisions_keep_the_newest_and_round_trip() -> None:
    status = ModelDeploymentStatus()
    for i in range(MAX_DECISIONS + 5):
        status.record_decision(
            Decision(
                time=T0 + timedelta(seconds=i),
                kind="scale" if i % 2 else "budget",
                from_=DecisionState(replicas=i),
                to=DecisionState(replicas=i + 1),
                reason=f"step {i}",
                signals={"kvCacheUsage": 0.9},
            )
        )
    assert len(status.decisions) == MAX_DECISIONS
    assert status.decisions[-1].reason == f"step {MAX_DECISIONS + 4}"
    assert status.last_decision("scale").reason == f"step {MAX_DECISIONS + 3}"
    wire = status.to_wire()
    assert wire["decisions"][0]["from"] == {"replicas": 5}
    assert ModelDeploymentStatus.model_validate(wire) == status
    assert (
        DecisionState(max_num_seqs=8, max_num_batched_tokens=512).describe() == "maxNumSeqs=8,maxNumBatchedTokens=512"
    )


@pytest.mark.parametrize("model", MODEL_SOURCES, ids=lambda m: next(iter(m)))
def test_each_model_source_resolves_to_itself(model: dict[str, Any]) -> None:
    source = ModelSource.model_validate(model)
    assert source.given() is source.resolved()
    assert source.resolved_served_name in ("Qwen2.5-0.5B-Instruct", "0.5b", "8b", "model")


@pytest.mark.parametrize(("spec", "message"), MODEL_SOURCE_REFUSED)
def test_model_source_rules_refuse_in_pydantic_with_the_servers_message(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ModelDeploymentSpec.model_validate(spec)


@pytest.mark.parametrize(("spec", "message"), MODEL_SOURCE_REFUSED)
def test_model_source_cel_rules_refuse_what_pydantic_refuses(spec: dict[str, Any], message: str) -> None:
    """The CRD's CEL rule with the message evaluates to false on the defaulted object (cel-python)."""
    schema = openapi_schema()["properties"]["spec"]
    wire = apply_defaults(schema, spec)
    section = next(iter(spec))
    node = schema["properties"][section]
    rules = list(node.get("x-kubernetes-validations", []))
    for name, sub in node.get("properties", {}).items():
        rules += [dict(r, scope=name) for r in sub.get("x-kubernetes-validations", [])]
    matching = [r for r in rules if message in r["message"]]
    assert matching, f"no CEL rule says {message!r}"
    for rule in matching:
        target = wire[section] if "scope" not in rule else wire[section].get(rule["scope"])
        assert target is not None and not cel_holds(rule["rule"], target), rule


@pytest.mark.parametrize(("spec", "message"), ADAPTERS_REFUSED)
def test_adapter_rules_refuse_in_pydantic_and_cel_alike(spec: dict[str, Any], message: str) -> None:
    """Pydantic refuses with the message of a CRD rule (on the spec, an adapter's source or a path inside it)
    that cel-python evaluates to false on the defaulted object."""
    with pytest.raises(ValidationError, match=re.escape(message)):
        ModelDeploymentSpec.model_validate(spec)
    schema = openapi_schema()["properties"]["spec"]
    wire = apply_defaults(schema, spec)
    source = schema["properties"]["adapters"]["items"]["properties"]["source"]
    scopes = [(schema, lambda: [wire]), (source, lambda: [a["source"] for a in wire["adapters"]])]
    scopes += [(sub, lambda n=name: [a["source"][n] for a in wire["adapters"] if n in a["source"]])
               for name, sub in source["properties"].items()]  # fmt: skip
    failed = [
        rule
        for node, targets in scopes
        for rule in node.get("x-kubernetes-validations", [])
        if message in rule["message"] and any(not cel_holds(rule["rule"], t) for t in targets())
    ]
    assert failed, f"no CEL rule saying {message!r} refuses {spec}"


def test_the_older_form_reads_as_the_new_sources() -> None:
    path = ModelSource.model_validate({"name": "/data/llama/8b", "volume": {"claimName": "w", "mountPath": "/data"}})
    assert path.resolved() == PathModel(claim_name="w", path="llama/8b")
    assert ModelSource().resolved() == "default" and ModelSource().is_default
    assert ModelSource(name="a/b").describe() == "huggingFace a/b@main"


def test_the_operator_docs_examples_validate() -> None:
    """Every ModelDeployment (or bare ``spec:``) in docs/operator.md's YAML blocks is a valid object."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    checked = 0
    for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
        for doc in yaml.safe_load_all(block):
            if doc.get("kind", "ModelDeployment") != "ModelDeployment" or "spec" not in doc:
                continue
            ModelDeployment.model_validate({"metadata": {"name": "docs"}, **doc})
            checked += 1
    assert checked >= 6
