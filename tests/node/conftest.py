"""The product on the real node, installed the way a user installs it: the built images imported into the node's
containerd, ``helm install`` of the chart, and a ModelDeployment applied with ``kubectl apply -f``.

The ModelDeployment is examples/modeldeployment-cpu.yaml with what this test bed needs changed: the tiny test model
from a hostPath PersistentVolume (the baked Gemma 3 270M loads for tens of seconds and asks for the 2-core node's
whole CPU), small requests so two replicas fit, and the real node's toleration and selector."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.cluster.binaries import Binaries, NodeBinaries
from e2e.cluster.client import KubeClient, has_condition, wait_for
from e2e.cluster.controlplane import ControlPlane
from e2e.cluster.node import NODE_SELECTOR, TOLERATIONS, RealNode
from tests.images.conftest import CONTAINER, Images, images, tiny_gemma_dir

__all__ = ["images", "tiny_gemma_dir"]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "paged"
EXAMPLE = REPO / "examples" / "modeldeployment-cpu.yaml"
MD_NAME = "tiny"
SERVED_NAME = "tiny"
MODEL_MOUNT = "/models"
READY_TIMEOUT_S = 300
ENGINE_UID = 65532


@dataclass(frozen=True)
class Kubectl:
    """The real kubectl against the test bed, as the cluster's admin."""

    binary: Path
    kubeconfig: Path

    def __call__(self, *args: str, input_text: str | None = None, timeout: float = 120) -> str:
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result.stdout


@pytest.fixture(scope="session")
def kubectl(kube_cluster: ControlPlane, kube_node_binaries: NodeBinaries) -> Kubectl:
    return Kubectl(kube_node_binaries.kubectl, kube_cluster.admin_kubeconfig)


@pytest.fixture(scope="session")
def node_images(kube_node: RealNode, images: Images) -> Images:
    """The engine and operator images in the node's containerd (imported once; kept across sessions by image ID)."""
    kube_node.import_images([images.operator, images.engine], str(CONTAINER))
    return images


@pytest.fixture(scope="session")
def model_dir(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model where a hostPath volume can serve it, readable by the engine's non-root user."""
    folder = tmp_path_factory.mktemp("node-model") / "tiny"
    shutil.copytree(tiny_gemma_dir, folder)
    for path in (folder.parent, folder, *folder.iterdir()):  # pytest's folders are private to root
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def model_deployment_manifest(namespace: str, claim: str, overrides: Mapping[str, Any] | None = None) -> dict:
    """examples/modeldeployment-cpu.yaml, changed only where this test bed needs it (see the module docstring)."""
    md = yaml.safe_load(EXAMPLE.read_text())
    md["metadata"] = {"name": MD_NAME, "namespace": namespace}
    spec = md["spec"]
    spec["model"] = {
        "name": f"{MODEL_MOUNT}/tiny",
        "servedName": SERVED_NAME,
        "volume": {"claimName": claim, "mountPath": MODEL_MOUNT},
    }
    spec["engine"].update({"maxModelLen": 1024, "kvCacheMemory": "64Mi", "extraArgs": ["--attention-backend", "cpu"]})
    spec["resources"] = {"cpu": "250m", "memory": "1536Mi", "nodeSelector": NODE_SELECTOR, "tolerations": TOLERATIONS}
    spec["replicas"] = {"min": 1, "max": 1}
    spec["autoscaling"]["enabled"] = False
    for key, value in (overrides or {}).items():
        spec[key] = value
    return md


def model_volume(namespace: str, model: Path) -> list[dict]:
    """A hostPath PersistentVolume with the model, pre-bound to a claim of the same name."""
    name = f"{namespace}-model"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(model.parent), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": "model"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "model", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


@dataclass
class Deployed:
    """One install of the product on the real node: the chart's operator in ``namespace`` watching it, and a
    ModelDeployment whose engines serve the tiny model."""

    namespace: str
    kubectl: Kubectl
    admin: KubeClient
    node: RealNode
    manifest: Path

    def engine_pods(self) -> list[dict]:
        selector = f"app.kubernetes.io/instance={MD_NAME}"
        pods = self.admin.get(f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=selector)["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def ready_engine_pods(self) -> list[dict]:
        return [p for p in self.engine_pods() if has_condition(p, "Ready")]

    def service_url(self) -> str:
        service = self.admin.get(f"/api/v1/namespaces/{self.namespace}/services/{MD_NAME}")
        port = service["spec"]["ports"][0]["port"]
        return f"http://{service['spec']['clusterIP']}:{port}"

    def complete(self, prompt: str = "The capital of France is", max_tokens: int = 4) -> dict:
        body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        response = httpx.post(f"{self.service_url()}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    def wait_ready(self, replicas: int, timeout_s: float = READY_TIMEOUT_S) -> list[dict]:
        def ready() -> list[dict] | None:
            self.node.ensure_running()
            pods = self.engine_pods()
            good = [p for p in pods if has_condition(p, "Ready")]
            return good if len(good) == replicas == len(pods) else None

        try:
            return wait_for(f"{replicas} Ready engine pod(s) in {self.namespace}", ready, timeout_s, interval_s=1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.describe()}") from None

    def describe(self) -> str:
        """What a person would look at first: the pods, events and the engine's log."""
        out = [self.kubectl("-n", self.namespace, "get", "pods,modeldeployments,deployments", "-o", "wide")]
        out.append(self.kubectl("-n", self.namespace, "get", "events", "--sort-by=.lastTimestamp")[-4000:])
        for pod in self.engine_pods():
            name = pod["metadata"]["name"]
            logs = subprocess.run(
                [str(self.kubectl.binary), f"--kubeconfig={self.kubectl.kubeconfig}", "-n", self.namespace, "logs",
                 name, "--all-containers", "--tail=60"], capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            out.append(f"--- {name}\n{logs.stdout}{logs.stderr}")
        return "\n".join(out)


def _namespace(prefix: str) -> str:
    return f"{re.sub(r'[^a-z0-9-]', '-', prefix.lower())[:30].strip('-')}-{secrets.token_hex(3)}"


def helm_install(helm: Path, kubeconfig: Path, namespace: str, images: Images) -> None:
    """``helm install`` of the chart, its operator watching ``namespace`` and placed on the real node."""
    repository, tag = images.operator.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag},
        "watchNamespace": namespace,
        "nodeSelector": NODE_SELECTOR,
        "tolerations": TOLERATIONS,
        # One operator on a 2-core node: the test deletes "the" operator pod. The chart's default of two with
        # leader election (a standby taking over) is tested against the API server (test_operator_leader_election).
        "operator": {"replicas": 1},
    }
    argv = [str(helm), "install", "paged", str(CHART), f"--kubeconfig={kubeconfig}", "--namespace", namespace,
            "--values", "-", "--wait", "--timeout", "5m"]  # fmt: skip
    result = subprocess.run(argv, input=yaml.safe_dump(values), capture_output=True, text=True, timeout=330)
    assert result.returncode == 0, f"helm install failed:\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def model_deployment_overrides(request: pytest.FixtureRequest) -> Mapping[str, Any]:
    """The ``spec`` fields a test module changes: its ``MODEL_DEPLOYMENT_OVERRIDES``, or what a module's own
    fixture of this name returns (when the values are only known at run time, e.g. a server's port)."""
    return getattr(request.module, "MODEL_DEPLOYMENT_OVERRIDES", None) or {}


@pytest.fixture(scope="module")
def namespace_objects() -> list[dict]:
    """Objects a test module needs in the namespace before its ModelDeployment (a Secret); a module overrides this
    fixture to add some. Their namespace is set to the test's."""
    return []


@pytest.fixture(scope="module")
def deployed(
    request: pytest.FixtureRequest,
    kube_binaries: Binaries,
    kube_cluster: ControlPlane,
    kube_admin: KubeClient,
    kube_node: RealNode,
    node_images: Images,
    kubectl: Kubectl,
    model_dir: Path,
    model_deployment_overrides: Mapping[str, Any],
    namespace_objects: list[dict],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    namespace = _namespace(request.module.__name__.rsplit(".", 1)[-1])
    kubectl("create", "namespace", namespace)
    try:
        helm_install(kube_binaries.helm, kube_cluster.admin_kubeconfig, namespace, node_images)
        folder = tmp_path_factory.mktemp("manifests")
        prerequisites = folder / "prerequisites.yaml"
        objects = [{**o, "metadata": {**o["metadata"], "namespace": namespace}} for o in namespace_objects]
        prerequisites.write_text(yaml.safe_dump_all([*model_volume(namespace, model_dir), *objects]))
        kubectl("apply", "-f", str(prerequisites))
        manifest = folder / "modeldeployment.yaml"
        md = model_deployment_manifest(namespace, "model", model_deployment_overrides)
        manifest.write_text(yaml.safe_dump(md, sort_keys=False))
        kubectl("apply", "-f", str(manifest))
        yield Deployed(namespace, kubectl, kube_admin, kube_node, manifest)
    finally:
        # The ModelDeployment first, while its operator runs to remove its finalizer; then the chart and the rest.
        kubectl("-n", namespace, "delete", "modeldeployments", "--all", "--wait=true", "--timeout=120s", timeout=150)
        subprocess.run(
            [str(kube_binaries.helm), "uninstall", "paged", f"--kubeconfig={kube_cluster.admin_kubeconfig}",
             "--namespace", namespace, "--wait", "--timeout", "2m"],
            capture_output=True, check=False, timeout=150,
        )  # fmt: skip
        kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s", timeout=150)
        kubectl("delete", "persistentvolume", f"{namespace}-model", "--ignore-not-found")
