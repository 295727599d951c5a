"""Each model source's rendering (volumes, mounts, the download init container), the pass-through pod fields, the
security defaults, the API key and admin port, and the ModelReady condition. Pure: no cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paged_operator.render import children
from paged_operator.render.model_mounts import inside
from paged_operator.status import model_ready as model_status
from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.budgets import Budgets

UID = "7f1c8d2e-0000-4000-8000-000000000001"


def md(spec: dict[str, Any] | None = None) -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "llm", "namespace": "team-a"}, "spec": spec or {}})


def pod_spec(obj: ModelDeployment) -> dict[str, Any]:
    return children.deployment(obj, UID)["spec"]["template"]["spec"]


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container["env"]]


def test_hugging_face_downloads_in_an_init_container_into_the_shared_claim() -> None:
    spec = pod_spec(md({"model": {
        "huggingFace": {"id": "meta-llama/Llama-3.2-1B", "revision": "refs/pr/3",
                        "tokenSecretRef": {"name": "hf", "key": "token"}, "endpoint": "http://hub.local:8080"},
        "cache": {"claimName": "models"}}}))  # fmt: skip
    (init,) = spec["initContainers"]
    dest = "/model-cache/hub/meta-llama--Llama-3.2-1B/refs--pr--3"
    assert init["args"] == ["download", "meta-llama/Llama-3.2-1B", "--revision", "refs/pr/3", "--dest", dest,
                            "--termination-log", "/dev/termination-log"]  # fmt: skip
    env = by_name(init["env"])
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert env["HF_ENDPOINT"]["value"] == "http://hub.local:8080"
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert by_name(init["volumeMounts"])["model-cache"] == {"name": "model-cache", "mountPath": "/model-cache"}
    assert by_name(spec["volumes"])["model-cache"] == {"name": "model-cache",
                                                       "persistentVolumeClaim": {"claimName": "models"}}  # fmt: skip
    engine = spec["containers"][0]
    assert engine["args"][1] == dest
    assert by_name(engine["volumeMounts"])["model-cache"]["readOnly"] is True
    assert "HF_TOKEN" not in env_names(engine), "the engine never needs the hub token"
    assert "limits" in init["resources"] and "nvidia.com/gpu" not in json.dumps(init["resources"])


def test_s3_downloads_with_credentials_from_a_secret_into_a_sized_empty_dir() -> None:
    spec = pod_spec(md({"model": {
        "s3": {"uri": "s3://weights/qwen/0.5b/", "endpoint": "http://minio:9000", "region": "eu-west-1",
               "credentialsSecretRef": {"name": "s3"}},
        "cache": {"sizeLimit": "20Gi"}}}))  # fmt: skip
    (init,) = spec["initContainers"]
    assert init["args"][:4] == ["download", "s3://weights/qwen/0.5b/", "--dest", "/model-cache/s3/weights/qwen--0.5b"]
    assert init["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio:9000"} in init["env"]
    assert {"name": "AWS_DEFAULT_REGION", "value": "eu-west-1"} in init["env"]
    assert by_name(spec["volumes"])["model-cache"] == {"name": "model-cache", "emptyDir": {"sizeLimit": "20Gi"}}


def test_path_and_image_sources_mount_read_only_without_a_download() -> None:
    spec = pod_spec(md({"model": {"path": {"claimName": "weights", "path": "llama/8b/"}}}))
    assert "initContainers" not in spec
    assert by_name(spec["volumes"])["model"]["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    assert spec["containers"][0]["args"][1] == "/models/llama/8b"
    spec = pod_spec(md({"model": {"image": {"reference": "registry.local/models/qwen:1", "pullPolicy": "Always"}}}))
    assert by_name(spec["volumes"])["model"]["image"] == {"reference": "registry.local/models/qwen:1",
                                                          "pullPolicy": "Always"}  # fmt: skip
    assert by_name(spec["containers"][0]["volumeMounts"])["model"] == {"name": "model", "mountPath": "/models",
                                                                        "readOnly": True}  # fmt: skip
    assert spec["containers"][0]["args"][1] == "/models"


@pytest.mark.parametrize("relative", ["..", "a/../..", "../etc", "a/../../b"])
def test_no_rendering_leaves_its_mount(relative: str) -> None:
    with pytest.raises(ValueError, match="leaves its mount /models"):
        inside("/models", relative)
    assert inside("/models", "a/../b") == "/models/b"


def test_secure_defaults_on_every_container() -> None:
    spec = pod_spec(md({"model": {"huggingFace": {"id": "a/b"}}, "pod": {"shmSize": "2Gi"}}))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    for container in [*spec["initContainers"], *spec["containers"]]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/cache/paged"} <= mounts
    assert by_name(spec["volumes"])["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    assert "/dev/shm" in {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}


def test_pod_fields_pass_through() -> None:
    obj = md({"pod": {
        "annotations": {"prometheus.io/scrape": "true"}, "labels": {"team": "ml", children.MODEL_DEPLOYMENT_LABEL: "x"},
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}], "envFrom": [{"configMapRef": {"name": "x"}}],
        "imagePullSecrets": [{"name": "regcred"}], "serviceAccountName": "engine", "runtimeClassName": "nvidia",
        "priorityClassName": "inference",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        "volumes": [{"name": "extra", "configMap": {"name": "templates"}}],
        "volumeMounts": [{"name": "extra", "mountPath": "/templates", "readOnly": True}]}})  # fmt: skip
    dep = children.deployment(obj, UID)
    template, spec = dep["spec"]["template"], dep["spec"]["template"]["spec"]
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert template["metadata"]["labels"]["team"] == "ml"
    assert template["metadata"]["labels"][children.MODEL_DEPLOYMENT_LABEL] == "llm", "the selector label wins"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert (spec["serviceAccountName"], spec["runtimeClassName"], spec["priorityClassName"]) == (
        "engine", "nvidia", "inference")  # fmt: skip
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert by_name(spec["volumes"])["extra"] == {"name": "extra", "configMap": {"name": "templates"}}
    engine = spec["containers"][0]
    assert by_name(engine["volumeMounts"])["extra"]["mountPath"] == "/templates"
    assert env_names(engine)[0] == "HTTPS_PROXY" and engine["envFrom"] == [{"configMapRef": {"name": "x"}}]


def test_api_key_comes_from_its_secret_and_nowhere_else() -> None:
    obj = md({"auth": {"apiKeySecretRef": {"name": "llm-key", "key": "key"}}})
    engine = pod_spec(obj)["containers"][0]
    assert {"name": "PAGED_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm-key", "key": "key"}}} in engine["env"]
    assert "--api-key" not in engine["args"]
    cm = json.dumps(children.config_map(obj, UID, Budgets(8, 512)))
    assert "llm-key" not in cm and "api-key" not in cm


def test_admin_api_has_its_own_port_outside_the_service() -> None:
    obj = md()
    engine = pod_spec(obj)["containers"][0]
    args = engine["args"]
    assert args[args.index("--admin-port") + 1] == str(children.ADMIN_PORT)
    assert {p["name"]: p["containerPort"] for p in engine["ports"]} == {"http": 8000, "admin": children.ADMIN_PORT}
    assert [p["targetPort"] for p in children.service(obj, UID)["spec"]["ports"]] == ["http"]
    assert f":{children.ADMIN_PORT}/admin/drain" in engine["lifecycle"]["preStop"]["exec"]["command"][-1]


# ---- ModelReady ----

HUB = md({"model": {"huggingFace": {"id": "acme/llama"}}})


def pod(name: str, **download: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"initContainerStatuses": [{"name": "model-download", **download}]}}  # fmt: skip


def failed(message: str, code: int = 1) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "message": message}}


def test_model_ready_shows_a_gated_model_as_such_not_as_a_crash_loop() -> None:
    gated = pod("llm-1", state={"waiting": {"reason": "CrashLoopBackOff"}},
                lastState=failed("ModelGated: acme/llama is a gated model: accept its terms"))  # fmt: skip
    value = model_status.model_ready(HUB, [gated, pod("llm-2", state={"running": {}})])
    assert (value.status, value.reason) == ("False", "ModelGated")
    assert "pod llm-1" in value.message and "accept its terms" in value.message


def test_model_ready_reads_the_reason_from_a_log_tail() -> None:
    tail = "downloading 5 files\nerror: DiskFull: not enough space in /model-cache/hub: needs 2 GiB more\n"
    assert model_status.failure({"exitCode": 1, "message": tail}) == (
        "DiskFull", "not enough space in /model-cache/hub: needs 2 GiB more")  # fmt: skip
    assert model_status.failure({"exitCode": 137, "message": ""}) == ("DownloadFailed", "exit code 137")
    assert model_status.failure({"exitCode": 0}) is None


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([], ("Unknown", "NoPods")),
        ([pod("a", state={"running": {}})], ("False", "Downloading")),
        ([pod("a", state={"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'}})],
         ("False", "CreateContainerConfigError")),
        ([pod("a", state={"waiting": {"reason": "PodInitializing"}})], ("False", "Pending")),
        ([pod("a", state={"terminated": {"exitCode": 0}}), pod("b", state={"terminated": {"exitCode": 0}})],
         ("True", "Downloaded")),
        ([pod("a", state={"terminated": {"exitCode": 0}}), {"metadata": {"name": "b"}, "status": {}}],
         ("False", "Pending")),
    ],
)  # fmt: skip
def test_model_ready_rules(pods: list[dict[str, Any]], expected: tuple[str, str]) -> None:
    value = model_status.model_ready(HUB, pods)
    assert (value.status, value.reason) == expected


def test_downloading_says_since_when() -> None:
    pods = [pod("a", state={"running": {"startedAt": "2026-12-01T10:00:00Z"}}),
            pod("b", state={"running": {"startedAt": "2026-12-01T10:05:00Z"}})]  # fmt: skip
    value = model_status.model_ready(HUB, pods)
    assert value.message == "2 of 2 pods downloading huggingFace acme/llama@main (since 2026-12-01T10:00:00Z)"


def test_model_ready_is_true_without_a_download() -> None:
    value = model_status.model_ready(md({"model": {"path": {"claimName": "w"}}}), [])
    assert (value.status, value.reason) == ("True", "NoDownload")


def downloaded(at: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": 0, "message": f"Downloaded: acme/llama@main at {at}"}}


def test_model_ready_names_the_commit_the_downloads_resolved_to() -> None:
    sha = "b" * 40
    value = model_status.model_ready(HUB, [pod("a", state=downloaded(f"commit {sha}")),
                                           pod("b", state=downloaded(f"commit {sha}"))])  # fmt: skip
    assert (value.status, value.reason) == ("True", "Downloaded")
    assert value.message == f"huggingFace acme/llama@main is on every pod's cache volume, at commit {sha}"
    assert model_status.resolved({"exitCode": 0, "message": "Downloaded: s3://w/x/ at version 0f3a"}) == "version 0f3a"
    assert model_status.resolved({"exitCode": 0, "message": "ModelGated: no"}) is None


def test_model_ready_says_when_replicas_resolved_a_branch_differently() -> None:
    pods = [pod("a", state=downloaded("commit " + "a" * 40)), pod("b", state=downloaded("commit " + "b" * 40))]
    value = model_status.model_ready(HUB, pods)
    assert value.status == "True"
    assert "resolved it differently" in value.message and "pin a commit sha" in value.message
