"""``spec.adapters``' rendering into every replica (volumes, mounts, download init containers, engine arguments)
and status. Pure: no cluster."""

from __future__ import annotations

from typing import Any

from paged_operator.render import children
from paged_operator.status import builder as status_builder
from paged_operator.status import model_ready as model_status
from paged_platform.api import AdapterStatus, ModelDeployment

UID = "7f1c8d2e-0000-4000-8000-000000000002"
ADAPTERS = [
    {"name": "sql", "source": {"huggingFace": {"id": "acme/sql-lora", "revision": "v2",
                                               "tokenSecretRef": {"name": "hf", "key": "token"}}}},
    {"name": "chat", "source": {"path": {"claimName": "loras", "path": "chat/v1"}}},
    {"name": "legal", "source": {"image": {"reference": "registry.local/loras/legal:1", "path": "adapter"}}},
    {"name": "med", "source": {"s3": {"uri": "s3://loras/med/", "credentialsSecretRef": {"name": "s3"}}}},
]  # fmt: skip


def md(spec: dict[str, Any]) -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "llm", "namespace": "team-a"}, "spec": spec})


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_every_source_kind_reaches_the_engine() -> None:
    obj = md({"model": {"huggingFace": {"id": "acme/base"}}, "adapters": ADAPTERS, "engine": {"maxLoraRank": 64}})
    pod = children.deployment(obj, UID)["spec"]["template"]["spec"]
    inits = by_name(pod["initContainers"])
    assert list(inits) == ["model-download", "adapter-download-0", "adapter-download-3"]
    sql_dir = "/adapter-cache/hub/acme--sql-lora/v2"
    assert inits["adapter-download-0"]["args"] == ["download", "acme/sql-lora", "--revision", "v2", "--dest",
                                                   sql_dir, "--termination-log", "/dev/termination-log"]  # fmt: skip
    assert by_name(inits["adapter-download-0"]["env"])["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf"
    assert inits["adapter-download-3"]["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert by_name(inits["adapter-download-3"]["volumeMounts"])["adapter-cache"]["mountPath"] == "/adapter-cache"
    volumes = by_name(pod["volumes"])
    assert volumes["adapter-1"]["persistentVolumeClaim"] == {"claimName": "loras", "readOnly": True}
    assert volumes["adapter-2"]["image"]["reference"] == "registry.local/loras/legal:1"
    assert volumes["adapter-cache"] == {"name": "adapter-cache", "emptyDir": {}}
    engine = pod["containers"][0]
    mounts = by_name(engine["volumeMounts"])
    assert all(mounts[v]["readOnly"] for v in ("adapter-1", "adapter-2", "adapter-cache"))
    args = engine["args"]
    start = args.index("--lora-modules")
    assert args[start + 1 : start + 5] == [f"sql={sql_dir}", "chat=/adapters/1/chat/v1", "legal=/adapters/2/adapter",
                                           "med=/adapter-cache/s3/loras/med"]  # fmt: skip
    assert args[args.index("--max-lora-rank") + 1] == "64"
    assert "--max-loras" not in args  # four fit the engine's default slots


def test_more_adapters_than_default_slots_raise_max_loras_and_extra_args_come_last() -> None:
    many = [{"name": f"a{i}", "source": {"path": {"claimName": "loras", "path": f"a{i}"}}} for i in range(6)]
    args = children.engine_args(md({"adapters": many, "engine": {"extraArgs": ["--max-loras", "8"]}}))
    assert args[-4:] == ["--max-loras", "6", "--max-loras", "8"]


def test_no_adapters_no_lora_arguments() -> None:
    obj = md({})
    assert "--lora-modules" not in children.engine_args(obj)
    assert "initContainers" not in children.deployment(obj, UID)["spec"]["template"]["spec"]
    assert status_builder.adapter_statuses(obj) == []


def test_status_lists_each_adapter_with_its_source() -> None:
    assert status_builder.adapter_statuses(md({"adapters": ADAPTERS[:2]})) == [
        AdapterStatus(name="sql", source="huggingFace acme/sql-lora@v2"),
        AdapterStatus(name="chat", source="path chat/v1 on claim loras"),
    ]


def test_a_failed_adapter_download_makes_model_ready_false_naming_the_adapter() -> None:
    obj = md({"model": {"path": {"claimName": "w"}}, "adapters": ADAPTERS})
    ok = {"name": "adapter-download-0", "state": {"terminated": {"exitCode": 0}}}
    bad = {
        "name": "adapter-download-3",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "ModelNotFound: s3://loras/med/ holds no objects"}},
    }
    pods = [{"metadata": {"name": "llm-1"}, "status": {"initContainerStatuses": [ok, bad]}}]  # fmt: skip
    value = model_status.model_ready(obj, pods)
    assert (value.status, value.reason) == ("False", "ModelNotFound")
    assert value.message == ("downloading adapter med (s3://loras/med/) failed in pod llm-1: "
                             "s3://loras/med/ holds no objects")  # fmt: skip
    healthy = [{"metadata": {"name": "llm-1"}, "status": {"initContainerStatuses": [ok]}}]
    assert model_status.model_ready(obj, healthy).reason == "NoDownload"
