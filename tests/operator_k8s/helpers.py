"""Helpers for the operator's cluster tests: paths, objects and conditions."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from e2e.cluster.client import ApiError, KubeClient

if TYPE_CHECKING:
    from tests.operator_k8s.conftest import OperatorProcess


def md_path(namespace: str, name: str = "") -> str:
    base = f"/apis/paged.dev/v1alpha1/namespaces/{namespace}/modeldeployments"
    return f"{base}/{name}" if name else base


def model_deployment(name: str, **spec: Any) -> dict[str, Any]:
    """A ModelDeployment sized for kwok nodes (small requests)."""
    spec.setdefault("resources", {"cpu": "100m", "memory": "128Mi"})
    return {"apiVersion": "paged.dev/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": name}, "spec": spec}


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def get_or_none(client: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        return client.get(path)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def settle(seconds: float) -> None:
    """Let the operator act (or not act) for a while before checking that nothing changed."""
    time.sleep(seconds)


def metric(proc: OperatorProcess, name: str) -> float:
    """The sum of a metric's samples on the operator's /metrics (0 when absent)."""
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
    return sum(float(m.group(2)) for m in pattern.finditer(proc.metrics()))
