"""The pure parts of the handlers and the command line: replica counts kept, policy state across spec changes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import kopf
import pytest
from paged_operator import handlers
from paged_operator.cli import build_parser, main
from paged_operator.clients.kube import (
    ApiError,
    KubeApi,
    collection_path,
    model_deployment_path,
    object_path,
    resource_of,
)
from paged_operator.control_loop import ControlLoop
from paged_operator.policy.config import controller_spec
from paged_operator.replica_count import (
    desired_replicas,
    owns_replicas,
    replicas_owner,
    scale_subresource_writer,
    scaled_externally,
)
from paged_operator.shared import Shared
from paged_platform.api import ModelDeployment
from paged_platform.engine_contract.budgets import Budgets


def md(**spec: object) -> ModelDeployment:
    return ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "ns"}, "spec": spec})


def test_desired_replicas_keeps_the_live_count_inside_the_bounds() -> None:
    bounds = md(replicas={"min": 2, "max": 5})
    # Just created (the API server's default of 1, nothing recorded yet): replicas.min.
    assert desired_replicas(bounds, 1, owned=False, recorded=None) == 2
    # The operator's last write wins over a status that may not show it yet.
    assert desired_replicas(bounds, 4, owned=True, recorded=3) == 4
    # Someone else scaled the Deployment: back to the operator's recorded count.
    assert desired_replicas(bounds, 9, owned=False, recorded=3) == 3
    assert desired_replicas(md(replicas={"min": 1, "max": 3}), 4, owned=True, recorded=4) == 3  # max lowered
    assert desired_replicas(md(replicas={"min": 5, "max": 6}), 4, owned=True, recorded=4) == 5  # min raised
    manual = md(replicas={"min": 2, "max": 5}, autoscaling={"enabled": False})
    assert desired_replicas(manual, 4, owned=True, recorded=4) == 2


def test_replica_ownership_is_read_from_managed_fields() -> None:
    def dep(manager: str, fields: dict) -> dict:
        return {"metadata": {"managedFields": [{"manager": manager, "operation": "Apply", "fieldsV1": fields}]}}

    assert owns_replicas(dep("paged-operator-replicas", {"f:spec": {"f:replicas": {}}}))
    assert not owns_replicas(dep("paged-operator", {"f:spec": {"f:template": {}}}))
    assert not owns_replicas({"metadata": {}})
    hpa = dep("kube-controller-manager", {"f:spec": {"f:replicas": {}}})
    assert replicas_owner(hpa) == "kube-controller-manager"
    manual = md(autoscaling={"enabled": False})
    assert scaled_externally(manual, hpa)  # autoscaling off: the HPA's count is left alone
    assert not scaled_externally(md(), hpa)  # autoscaling on: the operator sets it back
    assert not scaled_externally(manual, {"metadata": {}})  # just created: the operator sets replicas.min


def test_a_count_written_through_the_scale_subresource_is_told_apart() -> None:
    def written(*entries: tuple[str, str | None]) -> dict:
        fields = {"f:spec": {"f:replicas": {"f:min": {}}}}
        managed = [{"manager": m, "operation": "Update", "fieldsV1": fields} | ({"subresource": sub} if sub else {})
                   for m, sub in entries]  # fmt: skip
        return {"metadata": {"managedFields": managed}}

    assert scale_subresource_writer(written(("kube-controller-manager", "scale"))) == "kube-controller-manager"
    assert scale_subresource_writer(written(("kubectl-edit", None))) is None
    assert scale_subresource_writer(written(("paged-operator", "status"))) is None  # not the count
    assert scale_subresource_writer({"metadata": {}}) is None


ADAPTIVE = {"maxNumSeqs": 16, "maxNumBatchedTokens": 1024, "adaptive": {"enabled": True}}


def test_policy_state_survives_spec_changes_and_the_tuner_follows_the_config_map() -> None:
    loop = ControlLoop(Shared())
    spec = controller_spec(md(schedulerBudget=ADAPTIVE).spec)
    state = loop._state_for(spec, Budgets(16, 1024))
    assert state.tuner is not None and state.tuner.budgets == Budgets(16, 1024)
    loop.state = state
    assert loop._state_for(spec, Budgets(16, 1024)) is state
    # Someone else (a new static budget) changed the ConfigMap: the tuner restarts from it, windows are kept.
    moved = loop._state_for(spec, Budgets(32, 2048))
    assert moved.tuner is not None and moved.tuner.budgets == Budgets(32, 2048) and moved.window is state.window
    static = controller_spec(md().spec)
    assert loop._state_for(static, Budgets(64, 2048)).tuner is None


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    key = ["--token-key-file", "/k"]
    args = build_parser().parse_args(["run", "--standalone", "-n", "a", "-n", "b", "--metrics-port", "9090", *key])
    assert (args.namespace, args.standalone, args.metrics_port, args.all_namespaces) == (["a", "b"], True, 9090, False)
    for bad in (["run", *key], ["run", "-A", "-n", "x", *key], ["run", "-A", "--metrics-port", "70000", *key]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-A", "--scrape-timeout", "0", *key])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-A"])  # no key: the admin tokens could not be derived
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    key_file = tmp_path / "good-key"
    key_file.write_text("k" * 40)
    for args, message in [
        (["--leader-election"], "--leader-election needs --lease-namespace"),
        (["--leader-election", "--lease-namespace", "ns", "--renew-deadline", "20"], "retry period < renew deadline"),
    ]:
        with pytest.raises(SystemExit):
            main(["run", "-A", "--token-key-file", str(key_file), *args])
        assert message in capsys.readouterr().err
    short = tmp_path / "key"
    short.write_text("too short")
    with pytest.raises(SystemExit):
        main(["run", "-A", "--token-key-file", str(short)])
    assert "the key has 9 bytes, at least 32 needed" in capsys.readouterr().err


def test_api_paths_and_errors() -> None:
    assert collection_path("PodDisruptionBudget", "ns") == "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"
    assert object_path("Deployment", "ns", "m") == "/apis/apps/v1/namespaces/ns/deployments/m"
    assert resource_of(object_path("Deployment", "ns", "m")) == "deployments"
    assert resource_of(collection_path("Pod", "ns")) == "pods"
    assert resource_of(model_deployment_path("ns", "m") + "/status") == "modeldeployments/status"
    with pytest.raises(ValueError, match="'Node' is not one the operator manages"):
        collection_path("Node", "ns")
    error = ApiError("PATCH", "/x", 403, {"reason": "Forbidden", "message": "no"})
    assert (error.code, error.reason, str(error)) == (403, "Forbidden", "PATCH /x -> 403 Forbidden: no")


async def test_an_object_the_types_refuse_is_reported_once_and_not_retried() -> None:
    """What the CRD should have refused (an older CRD, a rule that differs): Ready=False/InvalidSpec, a Warning
    Event, and a permanent error, so kopf does not retry it in a loop."""
    requests: list[tuple[str, str, dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append((request.method, request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={})

    shared = Shared()
    shared._kube = KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(handler)))
    body = {
        "apiVersion": "paged.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {"replicas": {"min": 3, "max": 2}},
    }
    with pytest.raises(kopf.PermanentError, match="invalid ModelDeployment"):
        await handlers.reconcile(body=body, memo=kopf.Memo(shared=shared), retry=0)
    await shared.aclose()
    (patch, event) = requests
    assert patch[:2] == ("PATCH", "/apis/paged.dev/v1alpha1/namespaces/ns/modeldeployments/m/status")
    (ready,) = patch[2]["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert "replicas.min must not exceed replicas.max" in ready["message"]
    assert event[:2] == ("POST", "/api/v1/namespaces/ns/events")
    assert (event[2]["type"], event[2]["reason"]) == ("Warning", "InvalidSpec")
