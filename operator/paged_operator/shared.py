"""Operator-wide settings and clients, shared by every handler and control loop (kopf's memo holds one).

Clients are made on first use and closed once, at the operator's cleanup: the API-server client from kopf's
login (the same identity as kopf's watches), fenced by leader election; the engines' client without any
API-server credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import kopf

from paged_operator.clients.kube import KubeApi
from paged_operator.policy.admission import AdmissionPolicy
from paged_operator.render.settings import RenderSettings


@dataclass
class Options:
    """Operator-wide settings from the command line."""

    scrape_timeout_s: float = 2.0
    watch_timeout_s: int = 300
    request_timeout_s: float = 30.0
    pending_timeout_s: float = 120.0
    clusterwide: bool = True
    token_key: bytes | None = None  # derives the engines' admin tokens (``admin_token``)
    # Read the engines' series from this Prometheus server's query API; None: scrape each pod's /metrics.
    prometheus_url: str | None = None
    prometheus_timeout_s: float = 5.0  # for one round of queries (one per series, all at once)
    admission: AdmissionPolicy = field(default_factory=AdmissionPolicy)  # what a spec may name (``--allowed-*``)
    # The images an unset spec means, who a NetworkPolicy admits (``--engine-image``, ``--operator-pod-label``, ...).
    render: RenderSettings = field(default_factory=RenderSettings)


@dataclass
class Shared:
    """State shared by all handlers (kopf gives each object a shallow copy of the operator's memo)."""

    options: Options = field(default_factory=Options)
    connection: kopf.ConnectionInfo | None = None
    clock: Callable[[], float] = time.time  # the decisions' time (wall clock: it is kept in the status)
    leading: Callable[[], bool] = field(default=lambda: True)  # leader election's fence (``leader``)
    _kube: KubeApi | None = None
    _http: httpx.AsyncClient | None = None

    @property
    def kube(self) -> KubeApi:
        if self._kube is None:
            if self.connection is None:
                raise kopf.TemporaryError("not logged in to the API server yet", delay=1)
            self._kube = KubeApi.from_connection(
                self.connection, timeout_s=self.options.request_timeout_s, fence=lambda: self.leading()
            )
        return self._kube

    @property
    def http(self) -> httpx.AsyncClient:
        """The client for engine pods (plain HTTP, no API-server credentials)."""
        if self._http is None:
            self._http = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
        return self._http

    @property
    def token_key(self) -> bytes:
        if self.options.token_key is None:
            raise kopf.PermanentError("the operator was started without its token key (--token-key-file)")
        return self.options.token_key

    async def aclose(self) -> None:
        for client in (self._kube, self._http):
            if client is not None:
                await client.aclose()
