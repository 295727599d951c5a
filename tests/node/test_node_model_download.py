"""A ModelDeployment that names a Hugging Face repo, served on the real node: the operator's init container
downloads the model from a hub with the token from a Secret, then the engine serves it through the Service.

The hub is the tests' own (``tests/sources/hub_server``), listening on the host's end of the node's link: the
node's namespace has no default route, and that address (where the API server listens too) is what its pods
reach. The repo is gated, so the download only succeeds with the Secret's token; a second ModelDeployment of the
same repo without a token shows what a user who forgot it sees: ``ModelReady=False`` with ``ModelGated``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from paged_platform.ctl import app
from typer.testing import CliRunner

from e2e.cluster.client import wait_for
from e2e.cluster.node import RealNode
from tests.node.conftest import MD_NAME, SERVED_NAME, Deployed, model_deployment_manifest
from tests.sources.hub_server import HubServer, HubState, Repo

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.slow, pytest.mark.gemma]

REPO_ID = "acme/tiny-gemma"
REVISION = "v1"
COMMIT = "c0ffee" + "0" * 34
TOKEN = "hf_node_test_token"
SECRET = "hf-token"
GATED_MD = "forgot-token"


@pytest.fixture(scope="module")
def hub(kube_node: RealNode, tiny_gemma_dir: Path) -> Iterator[HubServer]:
    """The tiny model as a gated repo whose branch ``v1`` points at ``COMMIT``."""
    repo = Repo.from_folder(tiny_gemma_dir, branches={REVISION: COMMIT}, gated_token=TOKEN)
    with HubServer(HubState(repos={REPO_ID: repo}), host=kube_node.network.addrs.host_ip) as server:
        yield server


def hugging_face(hub: HubServer, *, token: bool) -> dict[str, Any]:
    source: dict[str, Any] = {"id": REPO_ID, "revision": REVISION, "endpoint": hub.url}
    if token:
        source["tokenSecretRef"] = {"name": SECRET, "key": "token"}
    return {"huggingFace": source, "servedName": SERVED_NAME}


@pytest.fixture(scope="module")
def model_deployment_overrides(hub: HubServer) -> Mapping[str, Any]:
    return {"model": hugging_face(hub, token=True)}


@pytest.fixture(scope="module")
def namespace_objects() -> list[dict]:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "stringData": {"token": TOKEN}}
    return [secret]


def _md_path(ns: str, name: str) -> str:
    return f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments/{name}"


def _condition(md: dict, kind: str) -> dict | None:
    return next((c for c in (md.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_the_init_container_downloads_the_model_and_the_engine_serves_it(deployed: Deployed, hub: HubServer):
    deployed.wait_ready(1)
    (pod,) = deployed.ready_engine_pods()
    (download,) = pod["status"]["initContainerStatuses"]
    assert download["name"] == "model-download"
    assert download["state"]["terminated"]["exitCode"] == 0
    assert download["state"]["terminated"]["message"] == f"Downloaded: {REPO_ID}@{REVISION} at commit {COMMIT}"
    pods = ipaddress.ip_network(deployed.node.network.addrs.pod_cidr)
    assert hub.state.clients and all(ipaddress.ip_address(c) in pods for c in hub.state.clients), hub.state.clients
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.state.requests if method == "GET"}
    assert "model.safetensors" in fetched

    completion = deployed.complete()
    assert completion["model"] == SERVED_NAME
    assert completion["usage"]["completion_tokens"] == 4
    assert isinstance(completion["choices"][0]["text"], str)

    path = _md_path(deployed.namespace, MD_NAME)

    def model_ready() -> dict | None:
        cond = _condition(deployed.admin.get(path), "ModelReady")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for("ModelReady=True", model_ready, timeout_s=60)
    assert cond["reason"] == "Downloaded"
    assert f"huggingFace {REPO_ID}@{REVISION}" in cond["message"] and f"at commit {COMMIT}" in cond["message"]


def test_a_gated_model_without_a_token_reads_as_gated_not_as_a_crash_loop(deployed: Deployed, hub: HubServer):
    ns = deployed.namespace
    manifest = model_deployment_manifest(ns, "model", {"model": hugging_face(hub, token=False)})
    manifest["metadata"]["name"] = GATED_MD
    file = deployed.manifest.with_name("forgot-token.yaml")
    file.write_text(yaml.safe_dump(manifest, sort_keys=False))
    deployed.kubectl("apply", "-f", str(file))
    try:

        def gated() -> dict | None:
            cond = _condition(deployed.admin.get(_md_path(ns, GATED_MD)), "ModelReady")
            return cond if cond and cond["status"] == "False" and cond["reason"] == "ModelGated" else None

        try:
            cond = wait_for("ModelReady=False ModelGated", gated, timeout_s=180, interval_s=1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{deployed.describe()}") from None
        assert "is a gated model" in cond["message"] and "HF_TOKEN" in cond["message"]
        selector = f"app.kubernetes.io/instance={GATED_MD}"
        (pod,) = deployed.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]
        engine = pod["status"].get("containerStatuses") or []
        assert not any("running" in (c.get("state") or {}) for c in engine), "the engine never starts"

        out = CliRunner().invoke(app, ["describe", GATED_MD, "--kubeconfig", str(deployed.kubectl.kubeconfig),
                                       "-n", ns], env={"COLUMNS": "250"})  # fmt: skip
        assert out.exit_code == 0, out.output
        assert "ModelReady" in out.output and "ModelGated" in out.output
        assert f"huggingFace {REPO_ID}@{REVISION}" in out.output
    finally:
        deployed.kubectl("-n", ns, "delete", "modeldeployment", GATED_MD, "--wait=true", "--timeout=120s", timeout=150)
