"""paged-ctl render: the operator's children of each ModelDeployment in a file, printed without a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from paged_operator.render.all_children import all_children
from paged_operator.render.children import config_map_budgets
from paged_operator.render.router import DEFAULT_CLUSTER_ROLE
from paged_operator.render.settings import RenderSettings, from_flags
from paged_platform.api import ModelDeployment
from paged_platform.ctl import app
from paged_platform.ctl.template import TOKEN_PLACEHOLDER, UID_PLACEHOLDER
from typer.testing import CliRunner

runner = CliRunner()
EXAMPLES = ("modeldeployment-cpu.yaml", "modeldeployment-gpu.yaml")


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, ["render", *args], env={"COLUMNS": "250"}, input=input)


def operator_objects(
    doc: dict[str, Any],
    namespace: str,
    role: str = DEFAULT_CLUSTER_ROLE,
    settings: RenderSettings = RenderSettings(),  # noqa: B008  frozen: nothing can change it between calls
) -> list[dict[str, Any]]:
    """What the operator's reconcile builds for a new object of this manifest (the uid and token stand-ins aside)."""
    md = ModelDeployment.from_wire({**doc, "metadata": {"namespace": namespace, **doc["metadata"]}})
    built = all_children(
        md,
        UID_PLACEHOLDER,
        admin_token=TOKEN_PLACEHOLDER,
        budgets=config_map_budgets(md, None),
        router_cluster_role=role,
        settings=settings,
    )
    return built.in_apply_order()


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_prints_exactly_what_the_operator_builds(examples_dir: Path, example: str) -> None:
    path = examples_dir / example
    result = invoke(str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("---\n")
    printed = list(yaml.safe_load_all(result.stdout))
    assert printed == operator_objects(yaml.safe_load(path.read_text()), "default")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in printed]
    name = printed[0]["metadata"]["ownerReferences"][0]["name"]
    assert kinds == [
        ("Secret", f"{name}-admin-token"),
        ("ConfigMap", f"{name}-engine"),
        ("Service", name),
        ("PodDisruptionBudget", name),
        ("Deployment", name),
    ]
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == UID_PLACEHOLDER for o in printed)
    assert "placeholders" in result.stderr


def test_render_includes_the_router_and_takes_the_cluster_role(examples_dir: Path) -> None:
    doc = yaml.safe_load((examples_dir / "modeldeployment-cpu.yaml").read_text())
    doc["metadata"]["namespace"] = "ml"
    doc["spec"]["router"] = {"enabled": True}
    result = invoke("-", "--router-cluster-role", "my-router", input=yaml.safe_dump(doc))
    assert result.exit_code == 0, result.output
    printed = list(yaml.safe_load_all(result.stdout))
    assert printed == operator_objects(doc, "ml", role="my-router")
    router = [(o["kind"], o["metadata"]["name"]) for o in printed[5:]]
    assert router == [("ServiceAccount", "gemma-router"), ("RoleBinding", "gemma-router"),
                      ("Service", "gemma-router"), ("PodDisruptionBudget", "gemma-router"),
                      ("Deployment", "gemma-router")]  # fmt: skip
    assert printed[6]["roleRef"]["name"] == "my-router"


def test_render_takes_the_operators_images_and_network_peers(examples_dir: Path) -> None:
    """With the flags the chart gives the operator, render prints what that operator would apply: its images for an
    unset engine and router image, and the NetworkPolicy admitting its pods and Prometheus."""
    doc = yaml.safe_load((examples_dir / "modeldeployment-cpu.yaml").read_text())
    doc["spec"].update(router={"enabled": True}, networkPolicy={"enabled": True})
    flags = ["--engine-image", "mirror.local/paged-engine:0.1.0", "--router-image", "mirror.local/paged-operator:0.1.0",
             "--operator-namespace", "paged-system", "--operator-pod-label", "app.kubernetes.io/component=operator",
             "--prometheus-pod-label", "app.kubernetes.io/name=prometheus"]  # fmt: skip
    result = invoke("-", *flags, input=yaml.safe_dump(doc))
    assert result.exit_code == 0, result.output
    printed = list(yaml.safe_load_all(result.stdout))
    settings = from_flags(
        engine_image="mirror.local/paged-engine:0.1.0",
        router_image="mirror.local/paged-operator:0.1.0",
        namespace="paged-system",
        pod_labels=["app.kubernetes.io/component=operator"],
        prometheus_namespace_labels=[],
        prometheus_pod_labels=["app.kubernetes.io/name=prometheus"],
    )
    assert printed == operator_objects(doc, "default", settings=settings)
    images = {o["kind"] + "/" + o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["image"]
              for o in printed if o["kind"] == "Deployment"}  # fmt: skip
    assert images == {"Deployment/gemma": "mirror.local/paged-engine:0.1.0",
                      "Deployment/gemma-router": "mirror.local/paged-operator:0.1.0"}  # fmt: skip
    (policy,) = [o for o in printed if o["kind"] == "NetworkPolicy"]
    assert len(policy["spec"]["ingress"]) == 3  # the router, the operator, Prometheus
    bad = invoke("-", "--prometheus-pod-label", "no-value", input=yaml.safe_dump(doc))
    assert bad.exit_code == 1 and "expected a label KEY=VALUE" in bad.stderr and not bad.stdout


def test_render_json_lists_the_children_of_every_document_in_the_namespace_given(examples_dir: Path) -> None:
    texts = [(examples_dir / e).read_text() for e in EXAMPLES]
    result = invoke("-", "-o", "json", "-n", "ml", input="\n---\n".join(texts))
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["kind"] == "List"
    expected = [o for text in texts for o in operator_objects(yaml.safe_load(text), "ml")]
    assert listed["items"] == expected and len(expected) == 10
    assert {o["metadata"]["namespace"] for o in listed["items"]} == {"ml"}


IN_PROD = "apiVersion: paged.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {name: a, namespace: prod}\n"
BAD = """\
apiVersion: paged.dev/v1alpha1
kind: ModelDeployment
metadata: {name: broken}
spec:
  engine: {blockSize: 7}
"""


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["missing.yaml"], None, "error: file missing.yaml not found"),
        (["-"], "a: [1,\n", "error: <stdin>:2:1: invalid YAML"),
        (["-"], "apiVersion: apps/v1\nkind: Deployment\n", "is apiVersion='apps/v1' kind='Deployment'"),
        (["-"], BAD, "spec.engine.blockSize: Input should be 8, 16, 32, 64 or 128"),
        (["-", "-n", "dev"], IN_PROD, "does not match -n dev"),
    ],
)  # fmt: skip
def test_render_refuses_bad_input_as_apply_does(args: list[str], stdin: str | None, message: str) -> None:
    result = invoke(*args, input=stdin)
    assert result.exit_code == 1
    assert message in result.stderr
    assert not result.stdout and "Traceback" not in result.output


def test_a_bad_output_format_is_a_usage_error(examples_dir: Path) -> None:
    result = invoke(str(examples_dir / EXAMPLES[0]), "-o", "table")
    assert result.exit_code == 2 and "'table' is not one of" in result.output
