"""kube.py without a cluster: kubeconfig resolution, error translation, an unreachable server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException
from paged_platform.ctl import app
from paged_platform.kube import KubeError, NotFoundError, UnreachableError, status_message, translated
from typer.testing import CliRunner


def api_exception(status: int, body: dict) -> ApiException:
    exc = ApiException(status=status, reason="Unprocessable Entity")
    exc.body = json.dumps(body)
    return exc


def test_validation_causes_are_spelled_out() -> None:
    exc = api_exception(
        422,
        {
            "message": 'ModelDeployment.paged.dev "x" is invalid: ...',
            "details": {
                "causes": [
                    {
                        "field": "spec.replicas.min",
                        "message": 'Invalid value: "object": replicas.min must not exceed replicas.max',
                    },
                    {"field": "spec.engine.blockSize", "message": "Unsupported value: 7"},
                ]
            },
        },
    )
    assert status_message(exc) == (
        'refused by the API server: spec.replicas.min: Invalid value: "object": replicas.min must not exceed'
        " replicas.max; spec.engine.blockSize: Unsupported value: 7"
    )


@pytest.mark.parametrize(
    ("status", "kind", "text"),
    [(404, NotFoundError, "thing not found (gone)"), (403, KubeError, "forbidden: gone"), (409, KubeError, "gone")],
)
def test_api_errors_become_kube_errors(status: int, kind: type[KubeError], text: str) -> None:
    with pytest.raises(kind) as info, translated("thing", "https://k"):
        raise api_exception(status, {"message": "gone"})
    assert str(info.value) == text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig(path: Path, server: str, namespace: str | None = None) -> Path:
    context = {"cluster": "c", "user": "u"} | ({"namespace": namespace} if namespace else {})
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": context}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_unreachable_server_exits_4_without_traceback(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{free_port()}")
    result = CliRunner().invoke(app, ["get", "--kubeconfig", str(config)])
    assert result.exit_code == UnreachableError.exit_code == 4
    assert "cannot reach the Kubernetes API server at http://127.0.0.1:" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--kubeconfig", "/no/such/file"], {}, "kubeconfig /no/such/file does not exist"),
        ([], {"KUBECONFIG": "/no/a:/no/b"}, "KUBECONFIG=/no/a:/no/b: no such file"),
        (["--context", "other"], None, "kubeconfig"),
    ],
)
def test_kubeconfig_errors(tmp_path: Path, args: list[str], env: dict[str, str] | None, message: str) -> None:
    if env is None:
        env = {"KUBECONFIG": str(kubeconfig(tmp_path / "config", "http://127.0.0.1:1"))}
    result = CliRunner().invoke(app, ["get", *args], env=env)
    assert result.exit_code == 1, result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_without_any_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(app, ["get"])
    assert result.exit_code == 1 and "no kubeconfig found" in result.stderr
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    in_pod = CliRunner().invoke(app, ["get"])
    assert in_pod.exit_code == 1 and "in-cluster" in in_pod.stderr and "Traceback" not in in_pod.output
