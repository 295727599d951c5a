"""The generated CRD and paged-ctl against a real kube-apiserver (the test bed's control plane).

The server must refuse what the pydantic types refuse, with the same messages; its defaulting must give the
same object as pydantic's; the scale and status subresources must behave as documented.
"""

from __future__ import annotations

import copy
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from paged_platform.api import (
    CRD_NAME,
    MAX_DECISIONS,
    Condition,
    Decision,
    DecisionState,
    MetricsSnapshot,
    ModelDeployment,
    ModelDeploymentStatus,
)
from paged_platform.crd import crd
from paged_platform.ctl import app
from pydantic import ValidationError
from typer.testing import CliRunner

from conftest import ADAPTERS_REFUSED, EXAMPLES, MODEL_SOURCE_REFUSED, MODEL_SOURCES
from e2e.cluster.client import APPLY_PATCH, ApiError, KubeClient, wait_for

pytestmark = pytest.mark.k8s

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="session")
def md_crd(kube_admin: KubeClient) -> str:
    """The generated CRD, applied (server-side, so an identical copy from another test is no conflict)."""
    kube_admin.request(
        "PATCH",
        f"{CRDS}/{CRD_NAME}",
        crd(),
        params={"fieldManager": "paged-platform-tests", "force": "true"},
        content_type=APPLY_PATCH,
    )

    def established() -> bool:
        conditions = (kube_admin.get(f"{CRDS}/{CRD_NAME}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(f"CRD {CRD_NAME} established", established, timeout_s=30)
    # Discovery of a new group lags establishment a little; wait until the collection answers.
    wait_for("modeldeployments served", lambda: kube_admin.get("/apis/paged.dev/v1alpha1/modeldeployments"))
    return CRD_NAME


def collection(namespace: str) -> str:
    return f"/apis/paged.dev/v1alpha1/namespaces/{namespace}/modeldeployments"


def doc(name: str = "m", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "paged.dev/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("example", ["modeldeployment-cpu.yaml", "modeldeployment-gpu.yaml"])
def test_examples_are_accepted_and_defaulted_like_pydantic(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, example: str
) -> None:
    manifest = yaml.safe_load((EXAMPLES / example).read_text())
    created = kube_admin.create(collection(kube_namespace), manifest)
    assert created["spec"] == ModelDeployment.model_validate(manifest).spec.to_wire()


def test_minimal_object_gets_every_default(kube_admin: KubeClient, kube_namespace: str, md_crd: str) -> None:
    created = kube_admin.create(collection(kube_namespace), doc("tiny"))
    assert created["spec"] == ModelDeployment.model_validate(doc("tiny")).spec.to_wire()


REFUSED = [
    ({"replicas": {"min": 3, "max": 2}}, "replicas.min must not exceed replicas.max"),
    ({"schedulerBudget": {"maxNumSeqs": 512, "maxNumBatchedTokens": 256}}, "must be at least maxNumSeqs"),
    ({"schedulerBudget": {"maxNumSeqs": 300, "adaptive": {"enabled": True}}}, "within adaptive.maxNumSeqs bounds"),
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
    ({"model": {"name": "/models/x", "volume": None}}, "model.volume must name the PersistentVolumeClaim"),
    ({"model": {"name": "/data/x", "volume": {"claimName": "w"}}}, "path under model.volume.mountPath"),
    ({"model": {"volume": {"claimName": "w"}}}, "takes no model.volume"),
    ({"autoscaling": {"targets": {"kvCacheUsage": 1.5}}}, "spec.autoscaling.targets.kvCacheUsage"),
    ({"engine": {"kvCacheMemory": "2 GB"}}, "spec.engine.kvCacheMemory"),
    ({"engine": {"kvCacheMemory": "0"}}, "spec.engine.kvCacheMemory"),
    ({"engine": {"kvCacheMemory": "500m"}}, "spec.engine.kvCacheMemory"),
    ({"engine": {"kvCacheMemory": 1}}, "spec.engine.kvCacheMemory"),
    ({"engine": {"blockSize": 24}}, "spec.engine.blockSize"),
    ({"tracing": {"exporter": "otlp"}}, "tracing.endpoint is required when tracing.exporter is otlp"),
    ({"tracing": {"exporter": "otlp", "endpoint": "otel-collector:4317"}}, "spec.tracing.endpoint in body"),
    ({"tracing": {"samplingRatio": 1.5}}, "spec.tracing.samplingRatio"),
    ({"tracing": {"protocol": "http/json"}}, "spec.tracing.protocol: Unsupported value"),
    ({"tracing": {"exporter": "jaeger"}}, "spec.tracing.exporter: Unsupported value"),
    *MODEL_SOURCE_REFUSED,
    *ADAPTERS_REFUSED,
]


@pytest.mark.parametrize("model", MODEL_SOURCES, ids=lambda m: next(iter(m)))
def test_every_model_source_is_accepted_and_defaulted_like_pydantic(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, model: dict[str, Any]
) -> None:
    created = kube_admin.create(collection(kube_namespace), doc(f"src-{next(iter(model)).lower()}", model=model))
    assert created["spec"] == ModelDeployment.model_validate(doc(model=model)).spec.to_wire()


@pytest.mark.parametrize(("spec", "message"), REFUSED)
def test_invalid_objects_are_refused_with_the_rule_message(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as info:
        kube_admin.create(collection(kube_namespace), doc(**spec))
    assert info.value.code == 422
    assert message in info.value.message


@pytest.mark.parametrize("kv_cache_memory", ["2Gi", "0.9", 2147483648])
def test_kv_cache_memory_is_stored_as_written_in_both_forms(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, kv_cache_memory: str | int
) -> None:
    name = f"kv-{str(kv_cache_memory).replace('.', '-').lower()}"
    created = kube_admin.create(collection(kube_namespace), doc(name, engine={"kvCacheMemory": kv_cache_memory}))
    assert created["spec"]["engine"]["kvCacheMemory"] == kv_cache_memory
    assert ModelDeployment.model_validate(created).spec.engine.kv_cache_memory == kv_cache_memory


def test_bad_name_is_refused(kube_admin: KubeClient, kube_namespace: str, md_crd: str) -> None:
    with pytest.raises(ApiError) as info:
        kube_admin.create(collection(kube_namespace), doc("a.b"))
    assert info.value.code == 422 and "DNS-1035 label" in info.value.message


def test_explicit_nulls_mean_unset(kube_admin: KubeClient, kube_namespace: str, md_crd: str) -> None:
    created = kube_admin.create(
        collection(kube_namespace), doc(model={"servedName": None}, engine={"maxModelLen": None})
    )
    assert "servedName" not in created["spec"]["model"] and "maxModelLen" not in created["spec"]["engine"]


def test_scale_subresource_writes_min(kube_admin: KubeClient, kube_namespace: str, md_crd: str) -> None:
    base = collection(kube_namespace)
    kube_admin.create(base, doc("s", replicas={"min": 1, "max": 3}))
    kube_admin.patch(f"{base}/s/scale", {"spec": {"replicas": 2}})
    assert kube_admin.get(f"{base}/s")["spec"]["replicas"] == {"min": 2, "max": 3}
    with pytest.raises(ApiError) as info:
        kube_admin.patch(f"{base}/s/scale", {"spec": {"replicas": 5}})
    assert info.value.code == 422 and "replicas.min must not exceed replicas.max" in info.value.message


STATUS = {
    "observedGeneration": 1,
    "replicas": 2,
    "readyReplicas": 1,
    "desiredReplicas": 2,
    "selector": "paged.dev/modeldeployment=st",
    "endpoint": "http://st.ns.svc:8000/v1",
    "budget": {"maxNumSeqs": 64, "maxNumBatchedTokens": 2048},
    "metrics": {
        "time": "2026-01-01T00:00:00Z",
        "replicas": 1,
        "kvCacheUsage": 0.5,
        "requestsWaiting": 1.0,
        "requestsRunning": 4.0,
        "preemptionRate": 0.0,
    },
    "conditions": [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Scaling",
            "message": "1/2",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "decisions": [
        {
            "time": "2026-01-01T00:00:00Z",
            "kind": "scale",
            "from": {"replicas": 1},
            "to": {"replicas": 2},
            "reason": "kvCacheUsage above target",
            "signals": {"kvCacheUsage": 0.9},
        }
    ],
}


def test_typed_status_round_trips_and_feeds_scale_and_columns(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str
) -> None:
    base = collection(kube_namespace)
    kube_admin.create(base, doc("st", replicas={"min": 1, "max": 3}))
    kube_admin.patch(f"{base}/st/status", {"status": STATUS})
    stored = kube_admin.get(f"{base}/st")
    assert ModelDeploymentStatus.model_validate(stored["status"]) == ModelDeploymentStatus.model_validate(STATUS)
    scale = kube_admin.get(f"{base}/st/scale")
    assert scale["spec"]["replicas"] == 1
    assert scale["status"] == {"replicas": 2, "selector": "paged.dev/modeldeployment=st"}
    # Printer columns come back as a meta.k8s.io Table, which the JSON helper does not ask for.
    response = kube_admin._http.get(f"{base}/st", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    columns = [c["name"] for c in response.json()["columnDefinitions"]]
    assert columns[:3] == ["Name", "Ready", "Desired"] and "KV" in columns and "Age" in columns
    cells = dict(zip(columns, response.json()["rows"][0]["cells"], strict=True))
    assert cells["Ready"] == 1 and cells["Desired"] == 2 and cells["KV"] == 0.5 and cells["Status"] == "Scaling"


@pytest.fixture
def ctl(kube_cluster: Any, kube_namespace: str, md_crd: str) -> Iterator[Any]:
    runner = CliRunner()
    kubeconfig = str(kube_cluster.admin_kubeconfig)

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(
            app, [*args, "--kubeconfig", kubeconfig, "-n", kube_namespace], input=input, env={"COLUMNS": "250"}
        )

    yield invoke


def test_ctl_apply_get_describe_scale_budget(ctl: Any, kube_namespace: str) -> None:
    applied = ctl("apply", "-f", str(EXAMPLES / "modeldeployment-cpu.yaml"))
    assert applied.exit_code == 0, applied.output
    again = ctl("apply", "-f", str(EXAMPLES / "modeldeployment-cpu.yaml"))  # idempotent server-side apply
    assert again.exit_code == 0, again.output

    got = json.loads(ctl("get", "gemma", "-o", "json").stdout)
    assert got["metadata"]["namespace"] == kube_namespace and got["spec"]["replicas"] == {"min": 1, "max": 3}
    managers = {f["manager"] for f in got["metadata"].get("managedFields", [])}
    assert not managers  # -o output drops managedFields
    listed = ctl("list")
    assert listed.exit_code == 0 and "gemma" in listed.stdout

    described = ctl("describe", "gemma")
    assert described.exit_code == 0 and "default (served as gemma-3-270m)" in described.stdout

    scaled = ctl("scale", "gemma", "--min", "2", "--max", "4")
    assert scaled.exit_code == 0, scaled.output
    budget = ctl("budget", "gemma", "--max-num-seqs", "48", "-o", "json")
    assert budget.exit_code == 0, budget.output
    spec = json.loads(ctl("get", "gemma", "-o", "json").stdout)["spec"]
    assert spec["replicas"] == {"min": 2, "max": 4} and spec["schedulerBudget"]["maxNumSeqs"] == 48

    refused = ctl("scale", "gemma", "--min", "9")
    assert refused.exit_code == 1 and "replicas.min must not exceed replicas.max" in refused.stderr

    missing = ctl("describe", "nope")
    assert missing.exit_code == 3 and "modeldeployment 'nope'" in missing.stderr


def test_ctl_server_dry_run_creates_nothing(ctl: Any) -> None:
    result = ctl("apply", "-f", str(EXAMPLES / "modeldeployment-gpu.yaml"), "--dry-run", "server")
    assert result.exit_code == 0, result.output
    assert ctl("get", "qwen").exit_code == 3


def test_ctl_reports_server_refusal_of_unknown_fields(ctl: Any, tmp_path: Path) -> None:
    manifest = doc("strict")
    # Valid for the client (metadata is free-form there), refused by strict field validation on the server.
    manifest["metadata"]["bogus"] = 1
    path = tmp_path / "md.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = ctl("apply", "-f", str(path))
    assert result.exit_code == 1 and "bogus" in result.stderr and "Traceback" not in result.output


def test_status_written_by_pydantic_is_accepted(kube_admin: KubeClient, kube_namespace: str, md_crd: str) -> None:
    base = collection(kube_namespace)
    kube_admin.create(base, doc("py"))
    status = ModelDeploymentStatus.model_validate(copy.deepcopy(STATUS))
    kube_admin.patch(f"{base}/py/status", {"status": status.to_wire()})
    assert kube_admin.get(f"{base}/py")["status"]["decisions"][0]["from"] == {"replicas": 1}


ENGINE_METRICS = b"""\
# TYPE paged_kv_cache_usage_ratio gauge
paged_kv_cache_usage_ratio{model_name="gemma-3-270m"} 0.25
# TYPE paged_requests_running gauge
paged_requests_running{model_name="gemma-3-270m"} 5
# TYPE paged_scheduler_max_num_seqs gauge
paged_scheduler_max_num_seqs{model_name="gemma-3-270m"} 64
"""


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = self.path == "/metrics"
        self.send_response(200 if found else 404)
        self.end_headers()
        if found:
            self.wfile.write(ENGINE_METRICS)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_ctl_top_reads_live_engine_metrics(kube_admin: KubeClient, kube_namespace: str, ctl: Any) -> None:
    """kwok runs the pods and gives them loopback IPs; a stand-in engine serves /metrics on the pod's IP."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    labels = {"paged.dev/modeldeployment": "topmd"}
    engine = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "topmd"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "engine", "image": "x", "ports": [{"name": "http", "containerPort": port}]}]
                },
            },
        },
    }
    kube_admin.create(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments", engine)
    kube_admin.create(collection(kube_namespace), doc("topmd"))
    kube_admin.patch(
        f"{collection(kube_namespace)}/topmd/status", {"status": {"selector": "paged.dev/modeldeployment=topmd"}}
    )

    def ready_pod() -> dict[str, Any] | None:
        pods = kube_admin.get(f"/api/v1/namespaces/{kube_namespace}/pods")["items"]
        ready = [
            p
            for p in pods
            if p["status"].get("podIP")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
        return ready[0] if ready else None

    pod = wait_for("a Ready engine pod", ready_pod, timeout_s=60)
    server = http.server.ThreadingHTTPServer((pod["status"]["podIP"], port), _MetricsHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        direct = ctl("top", "topmd", "--direct", "-o", "json")
        assert direct.exit_code == 0, direct.output
        (row,) = json.loads(direct.stdout)
        assert row["pod"] == pod["metadata"]["name"]
        assert row["kvCacheUsage"] == 0.25 and row["requestsRunning"] == 5 and row["maxNumSeqs"] == 64
        # Through the pod proxy the API server refuses loopback pod IPs (as it should): a per-pod error, not a crash.
        proxied = ctl("top", "topmd", "-o", "json")
        assert proxied.exit_code == 0, proxied.output
        (row,) = json.loads(proxied.stdout)
        assert "address not allowed" in row["error"]
    finally:
        server.shutdown()
        server.server_close()


def test_ctl_uses_the_contexts_namespace_and_picks_contexts_like_kubectl(
    kube_cluster: Any, kube_admin: KubeClient, kube_namespace: str, md_crd: str, tmp_path: Path
) -> None:
    kube_admin.create(collection(kube_namespace), doc("ctxmd"))
    config = yaml.safe_load(kube_cluster.admin.write_kubeconfig(tmp_path / "one", namespace=kube_namespace).read_text())
    # A second, current context pointing nowhere: only --context testbed reaches the cluster.
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"].append({"name": "broken", "context": {"cluster": "nowhere", "user": config["users"][0]["name"]}})
    config["current-context"] = "broken"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    runner = CliRunner()

    current = runner.invoke(app, ["list", "--kubeconfig", str(path)])
    assert current.exit_code == 4 and "cannot reach the Kubernetes API server at https://127.0.0.1:1" in current.stderr
    chosen = runner.invoke(app, ["list", "-o", "json", "--context", "testbed"], env={"KUBECONFIG": str(path)})
    assert chosen.exit_code == 0, chosen.output
    assert [i["metadata"]["name"] for i in json.loads(chosen.stdout)["items"]] == ["ctxmd"]  # the context's namespace


def _maybe(key: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


SPECS = st.fixed_dictionaries(
    {},
    optional={
        "replicas": st.fixed_dictionaries({}, optional={"min": st.integers(-1, 6), "max": st.integers(0, 6)}),
        "autoscaling": st.fixed_dictionaries(
            {},
            optional={
                "targets": st.fixed_dictionaries(
                    {},
                    optional={
                        "kvCacheUsage": st.sampled_from([0, 0.5, 1, 1.01]),
                        "ttftP95Seconds": st.sampled_from([0, 0.25, 601]),
                    },
                ),
                "scaleDown": st.fixed_dictionaries({}, optional={"maxStep": st.integers(0, 2)}),
            },
        ),
        "engine": st.fixed_dictionaries(
            {},
            optional={
                "blockSize": st.sampled_from([8, 16, 24]),
                "kvCacheMemory": st.sampled_from(["2Gi", "0.9", "1", ".5", "500m", "0", "1.5", 3, 1, "2 GB", -1]),
                "dtype": st.sampled_from(["auto", "int4"]),
            },
        ),
        "schedulerBudget": st.fixed_dictionaries(
            {},
            optional={
                "maxNumSeqs": st.sampled_from([1, 64, 300, 5000]),
                "maxNumBatchedTokens": st.sampled_from([16, 256, 2048, 20000]),
                "adaptive": st.fixed_dictionaries(
                    {},
                    optional={
                        "enabled": st.booleans(),
                        "maxNumSeqs": st.fixed_dictionaries(
                            {}, optional={"min": st.sampled_from([1, 100]), "max": st.sampled_from([50, 256])}
                        ),
                    },
                ),
            },
        ),
        "rollout": st.fixed_dictionaries(
            {}, optional={"maxSurge": st.sampled_from([0, 1, "0%", "25%", "x"]), "maxUnavailable": st.just(0)}
        ),
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "cpu": st.sampled_from(["500m", "2", 4, "1.5", "two", ""]),
                "gpus": st.integers(-1, 17),
                "gpuResourceName": st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "bad name"]),
                "nodeSelector": st.sampled_from([{}, {"pool": "gpu"}]),
                "tolerations": st.lists(
                    st.fixed_dictionaries(
                        {}, optional={"key": st.just("k"), "effect": st.sampled_from(["NoSchedule", "Sometimes"])}
                    ),
                    max_size=2,
                ),
                "affinity": st.sampled_from([{}, {"nodeAffinity": {"anything": [1, {"x": "y"}]}}]),
            },
        ),
        "service": st.fixed_dictionaries(
            {},
            optional={
                "port": st.sampled_from([0, 1, 8000, 65535, 65536]),
                "type": st.sampled_from(["NodePort", "Headless"]),
            },
        ),
        "unknownField": st.just(1),
        "model": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["default", "Qwen/Qwen2.5-0.5B", "/models/q", "/data/q", "bad name"]),
                "servedName": st.sampled_from(["qwen", "Qwen/Qwen2.5", "-bad"]),
                "volume": st.fixed_dictionaries(
                    {"claimName": st.sampled_from(["w", "Bad_Claim"])},
                    optional={"mountPath": st.sampled_from(["/models", "/data/"])},
                ),
            },
        ),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=SPECS)
def test_server_and_pydantic_agree_on_random_specs(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, spec: dict[str, Any]
) -> None:
    """The single-source claim, sampled: the API server accepts exactly what pydantic accepts, and stores what
    pydantic's defaults give."""
    manifest = doc("fuzz", **spec)
    try:
        expected = ModelDeployment.model_validate(manifest).spec.to_wire()
    except ValidationError:
        expected = None
    event("valid" if expected is not None else "invalid")
    try:
        created = kube_admin.request(
            "POST", collection(kube_namespace), manifest, params={"dryRun": "All", "fieldValidation": "Strict"}
        )
    except ApiError as exc:
        assert expected is None, f"server refused what pydantic accepts: {exc.message}"
        assert exc.code in (400, 422), exc  # 400: strict field validation (unknown field)
        return
    assert expected is not None, f"server accepted what pydantic refuses: {spec}"
    assert created["spec"] == expected


TIMES = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)).map(
    lambda t: t.replace(microsecond=0)
)


def _wire(model: type[Any], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Objects built from wire-form (camelCase) fields, as the operator's code and the server spell them."""
    return st.fixed_dictionaries(fields).map(model.model_validate)


STATUSES = _wire(
    ModelDeploymentStatus,
    observedGeneration=st.none() | st.integers(0, 10**6),
    replicas=st.integers(0, 1000),
    readyReplicas=st.integers(0, 1000),
    desiredReplicas=st.integers(0, 1000),
    selector=st.none() | st.just("paged.dev/modeldeployment=x"),
    conditions=st.lists(
        _wire(
            Condition,
            type=st.sampled_from(["Ready", "Progressing", "Degraded", "ScalingLimited"]),
            status=st.sampled_from(["True", "False", "Unknown"]),
            reason=st.from_regex(r"\A[A-Z][A-Za-z0-9]{0,20}\Z"),
            message=st.text(max_size=50),
            lastTransitionTime=TIMES,
            observedGeneration=st.none() | st.integers(0, 100),
        ),
        max_size=4,
        unique_by=lambda c: c.type,
    ),
    metrics=st.none()
    | _wire(
        MetricsSnapshot,
        time=TIMES,
        replicas=st.integers(0, 100),
        kvCacheUsage=st.floats(0, 1),
        requestsWaiting=st.floats(0, 1e6),
        requestsRunning=st.floats(0, 1e6),
        preemptionRate=st.floats(0, 1e3),
        prefixCacheHitRate=st.none() | st.floats(0, 1),
        ttftP95Seconds=st.none() | st.floats(0, 600),
    ),
    decisions=st.lists(
        _wire(
            Decision,
            time=TIMES,
            kind=st.sampled_from(["scale", "budget"]),
            **{"from": _wire(DecisionState, replicas=st.none() | st.integers(0, 100))},
            to=_wire(DecisionState, maxNumSeqs=st.none() | st.integers(1, 4096)),
            reason=st.text(max_size=100),
            signals=st.dictionaries(st.sampled_from(["kv_cache_usage", "waitingPerReplica"]), st.floats(0, 1e3)),
            dryRun=st.booleans(),
        ),
        max_size=MAX_DECISIONS,
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(status=STATUSES)
def test_every_status_the_operator_can_build_is_stored_as_written(
    kube_admin: KubeClient, kube_namespace: str, md_crd: str, status: ModelDeploymentStatus
) -> None:
    base = collection(kube_namespace)
    if not kube_admin.exists(f"{base}/st-fuzz"):
        kube_admin.create(base, doc("st-fuzz"))
    # A merge patch merges maps; replace the whole status so each example stands alone.
    stored = kube_admin.get(f"{base}/st-fuzz")
    stored["status"] = status.to_wire()
    written = kube_admin.replace(f"{base}/st-fuzz/status", stored)
    assert ModelDeploymentStatus.model_validate(written["status"]) == status
