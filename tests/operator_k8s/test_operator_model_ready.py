"""``ModelReady`` through the real control plane: a Hugging Face model whose download fails as a gated model
(the init container's termination message, set on the pod's status as the kubelet would) reads as ``ModelGated``
in the ModelDeployment's status and in ``paged-ctl describe``, not as a crash loop."""

from __future__ import annotations

import pytest
from paged_platform.api import ModelDeployment
from paged_platform.ctl import app
from typer.testing import CliRunner

from e2e.cluster.client import STRATEGIC_MERGE_PATCH, KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import condition, md_path, model_deployment

pytestmark = pytest.mark.k8s

GATED = "ModelGated: acme/llama is a gated model: accept its terms on the hub and give a token with access (HF_TOKEN)"


def test_a_gated_download_reads_as_gated(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, kube_cluster: object
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("llama", model={"huggingFace": {"id": "acme/llama"}},
                                                    autoscaling={"intervalSeconds": 5}))  # fmt: skip
    pods = f"/api/v1/namespaces/{ns}/pods"
    pod = wait_for("an engine pod", lambda: next(iter(kube_admin.get(pods)["items"]), None), timeout_s=60)
    assert pod["spec"]["initContainers"][0]["name"] == "model-download"
    name = pod["metadata"]["name"]

    def fail_download() -> None:
        status = {"name": "model-download", "ready": False, "restartCount": 3, "image": "x", "imageID": "",
                  "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                  "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": GATED}}}  # fmt: skip
        kube_admin.patch(f"{pods}/{name}/status", {"status": {"phase": "Pending", "initContainerStatuses": [status]}},
                         content_type=STRATEGIC_MERGE_PATCH)  # fmt: skip

    def gated() -> dict[str, object] | None:
        fail_download()  # again each time: nothing else may overwrite it for long
        cond = condition(kube_admin.get(md_path(ns, "llama")), "ModelReady")
        return cond if cond and cond["reason"] == "ModelGated" else None

    cond = wait_for("ModelReady=False ModelGated", gated, timeout_s=60)
    assert cond["status"] == "False"
    assert f"pod {name}" in cond["message"] and "accept its terms" in cond["message"]
    ModelDeployment.model_validate(kube_admin.get(md_path(ns, "llama")))

    kubeconfig = str(kube_cluster.admin_kubeconfig)  # type: ignore[attr-defined]
    out = CliRunner().invoke(app, ["describe", "llama", "--kubeconfig", kubeconfig, "-n", ns],
                             env={"COLUMNS": "250"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "ModelReady" in out.output and "ModelGated" in out.output
    assert "huggingFace acme/llama@main" in out.output
