"""The operator creates its token key once, as the chart expects: with nothing mounted it stores a new key as its
Secret (create only) and derives the engines' admin tokens from it; a restart with the Secret mounted derives the
same tokens."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from paged_operator import admin_token

from e2e.cluster.client import KubeClient, wait_for
from tests.operator_k8s.conftest import OperatorProcess
from tests.operator_k8s.helpers import get_or_none, md_path, model_deployment

pytestmark = pytest.mark.k8s

KEY_SECRET = "paged-token-key"


def test_the_operator_creates_its_key_once_and_derives_the_admin_tokens_from_it(
    kube_admin: KubeClient, kube_namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = kube_namespace
    operator.stop()  # the fixture's operator has a key file; this one starts as a fresh install does
    fresh = OperatorProcess(operator.kubeconfig, ns, tmp_path / "fresh", token_key_secret=KEY_SECRET)
    fresh.log_dir.mkdir()
    fresh.start()
    try:
        secret = wait_for(
            "the key Secret", lambda: get_or_none(kube_admin, f"/api/v1/namespaces/{ns}/secrets/{KEY_SECRET}"), 30
        )
        key = base64.b64decode(secret["data"]["key"])
        assert len(key) >= admin_token.MIN_KEY_BYTES
        owner = kube_admin.create(md_path(ns), model_deployment("keyed"))
        token_path = f"/api/v1/namespaces/{ns}/secrets/keyed-admin-token"
        token = wait_for("the admin token Secret", lambda: get_or_none(kube_admin, token_path), 60)
        assert base64.b64decode(token["data"]["token"]).decode() == admin_token.derive(key, owner["metadata"]["uid"])
    finally:
        fresh.stop()

    # restarted with the Secret mounted (the kubelet's copy: a file), it neither creates another nor changes the key
    fresh.token_key_file.write_bytes(key)
    fresh.start()
    try:
        assert kube_admin.get(f"/api/v1/namespaces/{ns}/secrets/{KEY_SECRET}")["data"]["key"] == secret["data"]["key"]
        assert "token key Secret" not in fresh.log_path.read_text()
    finally:
        fresh.stop()
