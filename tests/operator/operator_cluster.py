"""A stand-in API server for the control loop's tests, which also holds the children kopf's watches would."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
from paged_operator.clients.kube import REPLICAS_FIELD_MANAGER


class Cluster:
    """A stand-in API server (``down``: every request fails to connect) and, for reads, the children kopf's
    watches would hold (reading them needs no API server)."""

    def __init__(self, name: str) -> None:
        self.down = False
        self.writes: list[tuple[str, str, dict[str, Any]]] = []
        self.cm: dict[str, Any] | None = None
        self.deploy = {
            "metadata": {
                "name": name,
                "resourceVersion": "1",
                "managedFields": [{"manager": REPLICAS_FIELD_MANAGER, "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            },
            "spec": {"replicas": 2},
        }
        ready = [{"type": "Ready", "status": "True"}]
        self.engine_pods = [
            {"metadata": {"name": f"p{i}"}, "status": {"phase": "Running", "podIP": f"10.0.0.{i}", "conditions": ready}}
            for i in (1, 2)
        ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("All connection attempts failed", request=request)
        body = json.loads(request.content) if request.content else {}
        self.writes.append((request.method, request.url.path, body))
        if "/configmaps/" in request.url.path:
            self.cm = body
        return httpx.Response(201 if request.method == "POST" else 200, json=body)

    def writes_to(self, fragment: str) -> list[dict[str, Any]]:
        return [body for _, path, body in self.writes if fragment in path]

    async def deployment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.deploy

    async def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.cm

    async def pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        return list(self.engine_pods)

    async def router_pods(self, namespace: str, model_deployment: str) -> list[Mapping[str, Any]]:
        return []
