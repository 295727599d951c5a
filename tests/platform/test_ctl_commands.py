"""paged-ctl commands against an in-memory stand-in for the cluster: outputs, patches sent, errors and exit codes."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from paged_platform.crd import crd_yaml
from paged_platform.ctl import app
from paged_platform.ctl import commands as app_module
from paged_platform.kube import KubeError, KubeTarget, NotFoundError
from typer.testing import CliRunner

runner = CliRunner()
ENV = {"COLUMNS": "250"}

METRICS = """\
# TYPE paged_kv_cache_usage_ratio gauge
paged_kv_cache_usage_ratio{model_name="gemma-3-270m"} 0.42
paged_requests_running{model_name="gemma-3-270m"} 3
paged_requests_waiting{model_name="gemma-3-270m"} 1
paged_preemptions_total{model_name="gemma-3-270m"} 7
paged_prefix_cache_queries_total{model_name="gemma-3-270m"} 200
paged_prefix_cache_hits_total{model_name="gemma-3-270m"} 50
paged_scheduler_max_num_seqs{model_name="gemma-3-270m"} 32
paged_scheduler_max_num_batched_tokens{model_name="gemma-3-270m"} 1024
"""


def stored(name: str = "gemma", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "paged.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "generation": 2,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "paged-ctl"}],
        },
        "spec": {"replicas": {"min": 1, "max": 3}, "schedulerBudget": {"maxNumSeqs": 32, "maxNumBatchedTokens": 1024}},
        "status": status,
    }


STATUS = {
    "observedGeneration": 2,
    "replicas": 2,
    "readyReplicas": 2,
    "desiredReplicas": 2,
    "selector": "paged.dev/modeldeployment=gemma",
    "endpoint": "http://gemma.ml.svc:8000/v1",
    "budget": {"maxNumSeqs": 32, "maxNumBatchedTokens": 1024},
    "metrics": {
        "time": "2026-01-01T00:05:00Z",
        "replicas": 2,
        "kvCacheUsage": 0.91,
        "requestsWaiting": 6,
        "requestsRunning": 30,
        "preemptionRate": 0.2,
    },
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "ReplicasReady",
            "message": "2/2",
            "lastTransitionTime": "2026-01-01T00:01:00Z",
        },
        {
            "type": "ScalingLimited",
            "status": "True",
            "reason": "AtMaxReplicas",
            "message": "wants 4, max is 3",
            "lastTransitionTime": "2026-01-01T00:04:00Z",
        },
    ],
    "decisions": [
        {
            "time": "2026-01-01T00:03:00Z",
            "kind": "scale",
            "from": {"replicas": 1},
            "to": {"replicas": 2},
            "reason": "kvCacheUsage 0.91 above target 0.80",
            "signals": {"kvCacheUsage": 0.91, "waiting_per_replica": 6.0, "ttft_p95_seconds": 0.2, "queueDrain": 3.0},
        },
        {
            "time": "2026-01-01T00:04:00Z",
            "kind": "budget",
            "from": {"maxNumSeqs": 16},
            "to": {"maxNumSeqs": 32},
            "reason": "queue building up",
        },
    ],
}


class FakeKube:
    """Holds objects in memory; records what the commands send."""

    def __init__(self) -> None:
        self.namespace = "ml"
        self.server = "https://fake"
        self.objects: dict[str, dict[str, Any]] = {}
        self.applied: list[tuple[dict[str, Any], bool]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.pods: list[dict[str, Any]] = []
        self.pod_answers: dict[str, str | KubeError] = {}
        self.targets: list[KubeTarget] = []

    async def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.objects:
            raise NotFoundError(f"modeldeployment {name!r} in namespace {self.namespace!r} not found")
        return copy.deepcopy(self.objects[name])

    async def list_objects(self, namespace: str | None = None, all_namespaces: bool = False) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objects.values()]

    async def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        self.applied.append((obj, dry_run))
        return obj

    async def patch_spec(self, name: str, spec_patch: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        self.patches.append((name, spec_patch))
        obj = self.objects[name]
        for key, value in spec_patch.items():
            obj["spec"].setdefault(key, {}).update(value)
        return copy.deepcopy(obj)

    async def list_pods(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.pods

    async def pod_get(
        self, pod: str, port: int, path: str, *, pod_ip: str | None = None, namespace: str | None = None
    ) -> str:
        answer = self.pod_answers[f"{pod_ip or pod}:{port}/{path}"]
        if isinstance(answer, KubeError):
            raise answer
        return answer


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    kube = FakeKube()

    @asynccontextmanager
    async def connect(target: KubeTarget) -> AsyncIterator[FakeKube]:
        kube.targets.append(target)
        yield kube

    monkeypatch.setattr(app_module, "connect", connect)
    return kube


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), env=ENV, input=input)


def test_crd_prints_the_generated_definition() -> None:
    result = invoke("crd")
    assert result.exit_code == 0
    assert result.stdout == crd_yaml()


def test_apply_validates_then_server_side_applies(fake: FakeKube, examples_dir: Path) -> None:
    path = examples_dir / "modeldeployment-cpu.yaml"
    result = invoke("apply", "-f", str(path), "-n", "ml", "--context", "kind", "--kubeconfig", "/k")
    assert result.exit_code == 0, result.output
    assert "modeldeployment.paged.dev/gemma applied in namespace ml" in result.stdout
    ((sent, dry_run),) = fake.applied
    assert sent == yaml.safe_load(path.read_text()) and not dry_run  # sent as written, not defaulted
    assert fake.targets == [KubeTarget(kubeconfig="/k", context="kind", namespace="ml")]


def test_apply_server_dry_run_and_stdin(fake: FakeKube, examples_dir: Path) -> None:
    text = (examples_dir / "modeldeployment-gpu.yaml").read_text()
    result = invoke("apply", "-f", "-", "--dry-run", "server", input=text)
    assert result.exit_code == 0, result.output
    assert "(server dry run)" in result.stdout and fake.applied[0][1] is True


def test_apply_client_dry_run_needs_no_cluster(monkeypatch: pytest.MonkeyPatch, examples_dir: Path) -> None:
    def no_cluster(target: KubeTarget) -> None:
        raise AssertionError("client dry run must not connect")

    monkeypatch.setattr(app_module, "connect", no_cluster)
    result = invoke("apply", "-f", str(examples_dir / "modeldeployment-gpu.yaml"), "--dry-run", "client")
    assert result.exit_code == 0 and "qwen valid (client dry run)" in result.stdout


BAD = """\
apiVersion: paged.dev/v1alpha1
kind: ModelDeployment
metadata: {name: broken}
spec:
  replicas: {min: 5, max: 2}
  engine: {blockSize: 7}
  autoscaling: {targets: {kvCacheUsage: 2}}
"""


def test_apply_lists_every_field_error_without_a_traceback(fake: FakeKube) -> None:
    result = invoke("apply", "-f", "-", input=BAD)
    assert result.exit_code == 1
    assert "error: <stdin> (ModelDeployment broken) is invalid:" in result.stderr
    assert "spec.engine.blockSize: Input should be 8, 16, 32, 64 or 128" in result.stderr
    assert "spec.replicas: replicas.min must not exceed replicas.max" in result.stderr
    assert "spec.autoscaling.targets.kvCacheUsage: Input should be less than or equal to 1" in result.stderr
    assert "Traceback" not in result.output and not fake.applied


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["-f", "missing.yaml"], None, "error: file missing.yaml not found"),
        (["-f", "-"], "a: [1,\n", "error: <stdin>:2:1: invalid YAML"),
        (["-f", "-"], "", "error: <stdin>: no documents found"),
        (["-f", "-"], "apiVersion: apps/v1\nkind: Deployment\n", "is apiVersion='apps/v1' kind='Deployment'"),
        (["-f", "-"], "- just\n- a list\n", "document 1 is a list, not a mapping"),
    ],
)
def test_apply_user_errors(fake: FakeKube, args: list[str], stdin: str | None, message: str) -> None:
    result = invoke("apply", *args, input=stdin)
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output and not fake.applied


def test_bad_option_values_are_usage_errors(fake: FakeKube) -> None:
    result = invoke("apply", "-f", "-", "--dry-run", "maybe", input=BAD)
    assert result.exit_code == 2 and "'maybe' is not one of" in result.output and not fake.applied
    assert invoke("get", "-o", "xml").exit_code == 2


def test_apply_reports_unreadable_files(fake: FakeKube, tmp_path: Path) -> None:
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    result = invoke("apply", "-f", str(binary))
    assert result.exit_code == 1 and f"cannot read {binary}" in result.stderr


def test_apply_validates_every_document_before_applying_any(fake: FakeKube, examples_dir: Path) -> None:
    good = (examples_dir / "modeldeployment-cpu.yaml").read_text()
    result = invoke("apply", "-f", "-", input=good + "---\n" + BAD)
    assert result.exit_code == 1 and "<stdin> document 2 (ModelDeployment broken) is invalid" in result.stderr
    assert not fake.applied


def test_apply_refuses_a_namespace_mismatch(fake: FakeKube) -> None:
    doc = "apiVersion: paged.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {name: a, namespace: prod}\n"
    result = invoke("apply", "-f", "-", "-n", "dev", input=doc)
    assert result.exit_code == 1 and "does not match -n dev" in result.stderr


def test_get_formats(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    table = invoke("get")
    assert table.exit_code == 0, table.output
    header, *rows = [line.split() for line in table.stdout.strip().splitlines() if line.strip()]
    assert header == ["NAME", "MODEL", "READY", "DESIRED", "MIN", "MAX", "KV", "STATUS", "AGE"]
    assert rows[-1][:8] == ["gemma", "gemma-3-270m", "2", "2", "1", "3", "91%", "ReplicasReady"]
    as_json = json.loads(invoke("get", "gemma", "-o", "json").stdout)
    assert as_json["metadata"]["name"] == "gemma" and "managedFields" not in as_json["metadata"]
    listed = yaml.safe_load(invoke("list", "-o", "yaml").stdout)
    assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == ["gemma"]


def test_get_missing_object_exits_3(fake: FakeKube) -> None:
    result = invoke("get", "nope")
    assert result.exit_code == 3
    assert "modeldeployment 'nope' in namespace 'ml' not found" in result.stderr


def test_describe_shows_status_conditions_and_decisions(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    result = invoke("describe", "gemma")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for expected in (
        "default (served as gemma-3-270m)",
        "http://gemma.ml.svc:8000/v1",
        "2 ready, 2 desired, 2 current (min 1, max 3)",
        "KV 91%",
        "AtMaxReplicas",
        "kvCacheUsage 0.91 above target 0.80",
        "maxNumSeqs=16",
        "generation 2 of 2",
    ):
        assert expected in out, expected
    assert yaml.safe_load(invoke("describe", "gemma", "-o", "yaml").stdout)["status"]["readyReplicas"] == 2


def test_scale_patches_replica_bounds(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored()
    result = invoke("scale", "gemma", "--max", "5")
    assert result.exit_code == 0, result.output
    assert fake.patches == [("gemma", {"replicas": {"min": 1, "max": 5}})]
    assert "min 1 -> 1, max 3 -> 5" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min", "4"], "replicas.min must not exceed replicas.max"),
        (["--max", "0"], "replicas.max: Input should be greater than or equal to 1"),
        ([], "give --min, --max or both"),
    ],
)
def test_scale_refuses_bad_bounds(fake: FakeKube, args: list[str], message: str) -> None:
    fake.objects["gemma"] = stored()
    result = invoke("scale", "gemma", *args)
    assert result.exit_code == 1 and message in result.stderr
    assert not fake.patches


def test_budget_shows_and_changes(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    shown = invoke("budget", "gemma")
    assert shown.exit_code == 0
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert ["maxNumSeqs", "32", "32", "off"] in rows and ["maxNumBatchedTokens", "1024", "1024", "off"] in rows
    changed = invoke("budget", "gemma", "--max-num-seqs", "48", "-o", "json")
    assert changed.exit_code == 0, changed.output
    assert fake.patches == [("gemma", {"schedulerBudget": {"maxNumSeqs": 48}})]
    assert json.loads(changed.stdout)["spec"]["maxNumSeqs"] == 48


def test_budget_refuses_inconsistent_values(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored()
    result = invoke("budget", "gemma", "--max-num-seqs", "2000")
    assert result.exit_code == 1
    assert "maxNumBatchedTokens must be at least maxNumSeqs" in result.stderr
    assert not fake.patches


def pod(name: str, ready: bool, port: int = 8000, ip: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        | ({"podIP": ip} if ip else {}),
    }


def test_top_scrapes_ready_pods(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    fake.pods = [pod("gemma-a", True), pod("gemma-b", True, port=9000), pod("gemma-c", False)]
    fake.pod_answers = {"gemma-a:8000/metrics": METRICS, "gemma-b:9000/metrics": KubeError("connection refused")}
    result = invoke("top", "gemma", "-o", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["pod"] for r in rows] == ["gemma-a", "gemma-b"]
    assert rows[0]["kvCacheUsage"] == 0.42 and rows[0]["prefixCacheHitRate"] == 0.25 and rows[0]["preemptions"] == 7
    assert rows[1] == {"pod": "gemma-b", "error": "connection refused"}
    table = invoke("top", "gemma").stdout
    assert "42%" in table and "25%" in table and "connection refused" in table


def test_top_direct_scrapes_pod_ips(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    fake.pods = [pod("gemma-a", True, ip="10.0.0.7"), pod("gemma-b", True)]
    fake.pod_answers = {"10.0.0.7:8000/metrics": METRICS}
    rows = json.loads(invoke("top", "gemma", "--direct", "-o", "json").stdout)
    assert rows[0]["pod"] == "gemma-a" and rows[0]["requestsRunning"] == 3
    assert rows[1] == {"pod": "gemma-b", "error": "no pod IP yet"}


def test_metrics_port_choice() -> None:
    named = {"spec": {"containers": [{"ports": [{"containerPort": 1}, {"name": "http", "containerPort": 2}]}]}}
    assert app_module.metrics_port(named, 9) == 2
    assert app_module.metrics_port({"spec": {"containers": [{"ports": [{"containerPort": 1}]}]}}, 9) == 1
    assert app_module.metrics_port({"spec": {"containers": [{"name": "engine"}]}}, 9) == 9


def test_top_without_pods(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored()
    result = invoke("top", "gemma")
    assert result.exit_code == 1 and "has no pods yet" in result.stderr


def test_explain_relates_signals_to_targets(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored(**STATUS)
    data = json.loads(invoke("explain", "gemma", "-o", "json").stdout)
    assert data["decision"]["from"] == 1 and data["decision"]["to"] == 2
    kv = next(s for s in data["decision"]["signals"] if s["signal"] == "kvCacheUsage")
    assert kv["target"] == 0.75 and kv["ratio"] == pytest.approx(0.91 / 0.75)
    waiting = next(s for s in data["decision"]["signals"] if s["signal"] == "waiting_per_replica")
    assert waiting["target"] == 4 and waiting["ratio"] == 1.5
    ttft = next(s for s in data["decision"]["signals"] if s["signal"] == "ttft_p95_seconds")
    assert ttft["target"] is None  # no TTFT objective set
    other = next(s for s in data["decision"]["signals"] if s["signal"] == "queueDrain")
    assert other["target"] is None and other["ratio"] is None
    assert data["scalingLimited"] == {"reason": "AtMaxReplicas", "message": "wants 4, max is 3"}
    text = invoke("explain", "gemma").stdout
    assert "scaled 1 -> 2 replicas" in text and "Scaling limited" in text


def test_explain_without_decisions(fake: FakeKube) -> None:
    fake.objects["gemma"] = stored()
    result = invoke("explain", "gemma")
    assert result.exit_code == 0 and "No scaling decision recorded yet." in result.stdout


def test_server_text_with_brackets_is_shown_verbatim(fake: FakeKube) -> None:
    status = copy.deepcopy(STATUS)
    status["conditions"][0]["message"] = "pods [a, b] not ready [/x]"
    status["decisions"][0]["reason"] = "kv [bold]high[/bold]"
    status["conditions"][1]["message"] = "capped at [max]"
    fake.objects["gemma"] = stored(**status)
    described = invoke("describe", "gemma")
    assert described.exit_code == 0, described.output
    assert "pods [a, b] not ready [/x]" in described.stdout and "kv [bold]high[/bold]" in described.stdout
    explained = invoke("explain", "gemma")
    assert "kv [bold]high[/bold]" in explained.stdout and "capped at [max]" in explained.stdout


def test_errors_with_brackets_are_shown_verbatim(monkeypatch: pytest.MonkeyPatch) -> None:
    @asynccontextmanager
    async def refusing(target: KubeTarget) -> AsyncIterator[FakeKube]:
        raise KubeError("refused: spec.resources.tolerations[0].effect: Unsupported value [/x]")
        yield FakeKube()

    monkeypatch.setattr(app_module, "connect", refusing)
    result = invoke("list")
    assert result.exit_code == 1
    assert "refused: spec.resources.tolerations[0].effect: Unsupported value [/x]" in result.stderr
