"""``Ready`` names why engines do not serve, through the real control plane: an engine container in a crash loop
(its status set on the pod as the kubelet writes it) reads as ``EngineCrashLooping`` with its exit code and last
log lines, in the status, in an Event and in ``paged-ctl describe``."""

from __future__ import annotations

import pytest
from paged_platform.ctl import app
from typer.testing import CliRunner

from e2e.cluster.client import STRATEGIC_MERGE_PATCH, KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import condition, md_path, model_deployment

pytestmark = pytest.mark.k8s

LAST_LOG = "paged-engine serve: error: unrecognized arguments: --no-such-flag"


def test_a_crash_looping_engine_is_named_with_its_exit_code_and_log(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, kube_cluster: object
) -> None:
    ns = kube_namespace
    kube_admin.create(md_path(ns), model_deployment("crashy", engine={"extraArgs": ["--no-such-flag"]},
                                                    autoscaling={"intervalSeconds": 5}))  # fmt: skip
    pods = f"/api/v1/namespaces/{ns}/pods"
    pod = wait_for("an engine pod", lambda: next(iter(kube_admin.get(pods)["items"]), None), timeout_s=60)
    name = pod["metadata"]["name"]

    def crash() -> None:
        status = {"name": "engine", "ready": False, "restartCount": 4, "image": "x", "imageID": "",
                  "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
                  "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": LAST_LOG,
                                               "startedAt": "2026-12-04T10:00:00Z",
                                               "finishedAt": "2026-12-04T10:00:03Z"}}}  # fmt: skip
        ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
        kube_admin.patch(f"{pods}/{name}/status", {"status": {"containerStatuses": [status], "conditions": [ready]}},
                         content_type=STRATEGIC_MERGE_PATCH)  # fmt: skip

    def crash_looping() -> dict[str, object] | None:
        crash()  # again each time: nothing else may overwrite it for long
        cond = condition(kube_admin.get(md_path(ns, "crashy")), "Ready")
        return cond if cond and cond["reason"] == "EngineCrashLooping" else None

    cond = wait_for("Ready=False EngineCrashLooping", crash_looping, timeout_s=60)
    assert cond["status"] == "False"
    assert f"pod {name}" in cond["message"] and "exited with code 2" in cond["message"]
    assert "--no-such-flag" in cond["message"]
    events = kube_admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector="involvedObject.name=crashy")["items"]
    (event,) = [e for e in events if e["reason"] == "EngineCrashLooping"]
    assert event["type"] == "Warning" and "--no-such-flag" in event["message"]

    kubeconfig = str(kube_cluster.admin_kubeconfig)  # type: ignore[attr-defined]
    out = CliRunner().invoke(app, ["describe", "crashy", "--kubeconfig", kubeconfig, "-n", ns],
                             env={"COLUMNS": "250"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "EngineCrashLooping" in out.output
