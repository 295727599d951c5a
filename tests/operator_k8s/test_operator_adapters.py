"""``spec.adapters`` through the real control plane: the API server validates them against the CRD, the operator
renders them into the engine Deployment, reports them in status, and follows an edit (a new adapter rolls out)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import get_or_none, md_path, model_deployment

pytestmark = pytest.mark.k8s

SQL = {"name": "sql", "source": {"huggingFace": {"id": "acme/sql-lora", "revision": "v2"}}}
CHAT = {"name": "chat", "source": {"path": {"claimName": "loras", "path": "chat"}}}


def engine_args(client: KubeClient, ns: str, name: str) -> list[str] | None:
    dep = get_or_none(client, f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
    return None if dep is None else dep["spec"]["template"]["spec"]["containers"][0]["args"]


def lora_modules(args: list[str]) -> list[str]:
    start = args.index("--lora-modules") + 1
    end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
    return args[start:end]


def test_adapters_are_rendered_into_replicas_and_reported(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("tuned", adapters=[SQL], engine={"maxLoraRank": 32}))
    args = wait_for("Deployment with --lora-modules", lambda: engine_args(kube_admin, ns, "tuned"), 60)
    assert lora_modules(args) == ["sql=/adapter-cache/hub/acme--sql-lora/v2"]
    assert args[args.index("--max-lora-rank") + 1] == "32"
    dep = kube_admin.get(f"/apis/apps/v1/namespaces/{ns}/deployments/tuned")
    pod = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["adapter-download-0"]

    def reported(want: list[dict[str, Any]]) -> Any:
        status = kube_admin.get(md_path(ns, "tuned")).get("status") or {}
        return status if status.get("adapters") == want else None

    wait_for("status.adapters", lambda: reported([{"name": "sql", "source": "huggingFace acme/sql-lora@v2"}]), 60)

    kube_admin.patch(md_path(ns, "tuned"), {"spec": {"adapters": [SQL, CHAT]}})

    def both() -> list[str] | None:
        args = engine_args(kube_admin, ns, "tuned")
        return args if args is not None and len(lora_modules(args)) == 2 else None

    args = wait_for("Deployment with both adapters", both, 60)
    assert lora_modules(args)[1] == "chat=/adapters/1/chat"
    wait_for("status with both adapters", lambda: reported([
        {"name": "sql", "source": "huggingFace acme/sql-lora@v2"},
        {"name": "chat", "source": "path chat on claim loras"},
    ]), 60)  # fmt: skip
