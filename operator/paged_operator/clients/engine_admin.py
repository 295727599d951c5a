"""Talking to the engine pods themselves: which ones serve (``/ready``), and pushing budgets (``/admin/budgets``,
in the engine contract's bodies: ``BudgetUpdate`` out, ``BudgetsReport`` back).

Kubernetes readiness is necessary but not sufficient: the operator only counts a pod as ready when its
engine also answers ``/ready`` within a short timeout, so a pod whose engine is still loading (or whose
readiness the kubelet has not caught up with) is *starting*, not a ready replica reporting nothing.
Every call has its own timeout and a failure becomes a value, never an exception, so one slow pod
cannot hold up a decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from paged_platform.engine_contract.admin import BUDGETS_PATH, BudgetsReport, BudgetUpdate
from paged_platform.engine_contract.budgets import Budgets
from pydantic import ValidationError

from paged_operator.clients.metrics_source import PodTarget


@dataclass(frozen=True)
class EnginePod:
    """A Kubernetes-ready engine pod: its name, base URL (``http://<pod-ip>:<port>``) and the admin API's base URL
    (its own port, not in the Service; the public one when the engine has no separate admin port)."""

    name: str
    base_url: str
    admin_url: str | None = None

    @property
    def admin_base(self) -> str:
        return self.admin_url or self.base_url

    @property
    def metrics_target(self) -> PodTarget:
        return PodTarget(self.name, f"{self.base_url}/metrics")


def engine_pod(pod: Mapping[str, Any], port: int, admin_port: int | None = None) -> EnginePod:
    ip = pod["status"]["podIP"]
    host = f"[{ip}]" if ":" in ip else ip
    admin = f"http://{host}:{admin_port}" if admin_port is not None else None
    return EnginePod(pod["metadata"]["name"], f"http://{host}:{port}", admin)


class EngineAdmin:
    """Readiness probes and budget pushes, each bounded by ``timeout_s``."""

    def __init__(self, client: httpx.AsyncClient, *, timeout_s: float = 2.0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"engine call timeout must be positive, got {timeout_s} s")
        self._client = client
        self._timeout_s = timeout_s

    async def serving(self, pods: Sequence[EnginePod]) -> tuple[list[EnginePod], dict[str, str]]:
        """(pods whose engine answers /ready with 200, pod → why not for the others)."""
        answers = await asyncio.gather(*(self._ready(pod) for pod in pods))
        ready = [pod for pod, why in zip(pods, answers, strict=True) if why is None]
        return ready, {pod.name: why for pod, why in zip(pods, answers, strict=True) if why is not None}

    async def _ready(self, pod: EnginePod) -> str | None:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.get(f"{pod.base_url}/ready", timeout=self._timeout_s)
        except TimeoutError:
            return f"/ready gave no answer within {self._timeout_s:g} s"
        except httpx.HTTPError as exc:
            return f"/ready: {type(exc).__name__}: {exc}"
        return None if response.status_code == 200 else f"/ready answered HTTP {response.status_code}"

    async def push_budgets(self, pods: Sequence[EnginePod], budgets: Budgets, token: str) -> dict[str, str]:
        """PUT the budgets to each pod; returns pod → error for those that did not take them."""
        body = BudgetUpdate.of(budgets).model_dump(exclude_none=True)
        answers = await asyncio.gather(*(self._put(pod, body, budgets, token) for pod in pods))
        return {pod.name: why for pod, why in zip(pods, answers, strict=True) if why is not None}

    async def _put(self, pod: EnginePod, body: dict[str, int], budgets: Budgets, token: str) -> str | None:
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.put(
                    f"{pod.admin_base}{BUDGETS_PATH}", json=body, headers=headers, timeout=self._timeout_s
                )
        except TimeoutError:
            return f"no answer within {self._timeout_s:g} s"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.is_error:
            return f"HTTP {response.status_code}: {_error_message(response)}"
        try:
            in_force = BudgetsReport.model_validate_json(response.content).budgets
        except (ValidationError, ValueError) as exc:
            return f"unreadable answer: {exc}"
        return None if in_force == budgets else f"answered with budgets {in_force.describe()}"


def _error_message(response: httpx.Response) -> str:
    """The engine's error message and the field it names (its OpenAI-style envelope), else the raw text."""
    try:
        error = response.json()["error"]
        return f"{error['message']}" + (f" (param {error['param']})" if error.get("param") else "")
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
