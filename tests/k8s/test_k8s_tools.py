"""The real helm and promtool binaries work on our kinds of files, and the build script is a no-op once built."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.cluster.binaries import BUILD_SCRIPT, Binaries, parse_build_output

pytestmark = pytest.mark.k8s

DATA = Path(__file__).parent / "data"


def run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, check=False)


def test_helm_lint_passes_on_the_smoke_chart(kube_binaries: Binaries) -> None:
    result = run(kube_binaries.helm, "lint", "--strict", DATA / "chart")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_helm_lint_fails_on_a_broken_chart(kube_binaries: Binaries, tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(DATA / "chart", chart)
    (chart / "templates" / "configmap.yaml").write_text("data: {{ .Values.greeting | nosuchfunction }}\n")
    result = run(kube_binaries.helm, "lint", chart)
    assert result.returncode != 0
    assert "nosuchfunction" in result.stdout + result.stderr


def test_helm_template_renders_values(kube_binaries: Binaries) -> None:
    result = run(kube_binaries.helm, "template", "smoke", DATA / "chart", "--namespace", "ns1", "--set", "greeting=hi")
    assert result.returncode == 0, result.stderr
    objects = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
    assert objects[("ConfigMap", "smoke-greeting")]["data"] == {"greeting": "hi"}
    assert objects[("ServiceAccount", "smoke-reader")]["metadata"]["namespace"] == "ns1"
    role = objects[("Role", "smoke-reader")]
    assert role["rules"][0]["resources"] == ["configmaps"]


def test_promtool_checks_and_unit_tests_rules(kube_binaries: Binaries) -> None:
    check = run(kube_binaries.promtool, "check", "rules", DATA / "rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 2 rules found" in check.stdout
    tested = run(kube_binaries.promtool, "test", "rules", "rules_test.yaml", cwd=DATA)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_promtool_rejects_a_bad_expression(kube_binaries: Binaries, tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text("groups:\n  - name: g\n    rules:\n      - record: x:y\n        expr: sum(rate(foo[5m])\n")
    result = run(kube_binaries.promtool, "check", "rules", rules)
    assert result.returncode != 0
    assert "parse error" in (result.stdout + result.stderr).lower()


def test_build_script_is_a_no_op_when_binaries_are_cached(kube_binaries: Binaries) -> None:
    result = run("bash", BUILD_SCRIPT)
    assert result.returncode == 0, result.stderr
    assert "building" not in result.stderr  # nothing was rebuilt
    paths = parse_build_output(result.stdout)
    assert paths["kube-apiserver"] == kube_binaries.kube_apiserver and paths["helm"] == kube_binaries.helm
