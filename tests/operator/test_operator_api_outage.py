"""Decisions the API server could not take (``api_outage``): what counts as unavailable, the report, and the
control loop through an outage (stand-in API server and engines): nothing in force changes, the policies stay
at the last decision carried out, and the first decision written afterwards reports the gap once."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sized
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import kopf
import pytest
from paged_operator import handlers
from paged_operator.clients.kube import ApiError, KubeApi
from paged_operator.control_loop import ControlLoop
from paged_operator.render import children
from paged_operator.shared import Options, Shared
from paged_operator.status import api_outage
from paged_platform.engine_contract.budgets import Budgets

from tests.operator.operator_cluster import Cluster
from tests.operator.operator_exposition import budgets_answer, exposition

T0 = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("exc", "unavailable"),
    [
        (httpx.ConnectError("All connection attempts failed"), True),
        (httpx.ReadTimeout("timed out"), True),
        (TimeoutError(), True),
        (ApiError("PATCH", "/x", 503, {"reason": "ServiceUnavailable"}), True),
        (ApiError("PATCH", "/x", 504, {"reason": "Timeout"}), True),
        (ApiError("GET", "/x", 429, {"reason": "TooManyRequests"}), True),
        (ApiError("PATCH", "/x", 403, {"reason": "Forbidden"}), False),  # a refusal, not an outage
        (ApiError("PATCH", "/x", 422, {"reason": "Invalid"}), False),
        (httpx.DecodingError("bad gzip"), False),
    ],
)
def test_what_counts_as_the_api_server_being_unavailable(exc: BaseException, unavailable: bool) -> None:
    assert api_outage.is_unavailable(exc) is unavailable


def test_skipped_decisions_add_up_to_one_report() -> None:
    outage = api_outage.skipped(None, T0, httpx.ConnectError("refused"))
    outage = api_outage.skipped(outage, T0 + timedelta(seconds=5), TimeoutError())
    assert (outage.since, outage.skipped, outage.last_error) == (T0, 2, "TimeoutError")
    report = api_outage.report(outage, T0 + timedelta(seconds=12), 3, Budgets(8, 512))
    assert (report.status, report.reason) == ("True", "APIUnavailable")
    assert report.message == (
        "the API server could not be reached for 12 s (2 decisions skipped since 2026-12-01T14:00:00Z; last error: "
        "TimeoutError); kept 3 replicas and budgets 8/512 meanwhile"
    )


SPEC: dict[str, Any] = {
    "replicas": {"min": 1, "max": 4},
    "autoscaling": {"intervalSeconds": 5, "targets": {"kvCacheUsage": 0.95, "preemptionRate": 5}},
    "schedulerBudget": {
        "maxNumSeqs": 48,
        "maxNumBatchedTokens": 2048,
        "adaptive": {"enabled": True, "maxNumSeqs": {"min": 8, "max": 64}},
    },
}


class Engines:
    """Every engine's metrics: a preemption storm at full KV, so the tuner wants to lower ``max_num_seqs``."""

    def __init__(self) -> None:
        self.preemptions = 0.0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(200, json={"ready": True})
        if request.method == "PUT":
            return httpx.Response(200, json=budgets_answer(request.content))
        text = exposition(kv=0.92, running=40, preemptions=self.preemptions, max_num_seqs=48)
        return httpx.Response(200, text=text)


async def test_through_an_outage_nothing_in_force_changes_and_the_gap_is_reported_once() -> None:
    body = {
        "apiVersion": "paged.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": 1, "resourceVersion": "7"},
        "spec": SPEC,
    }
    md = handlers.parse(body)
    cluster, engines = Cluster("m"), Engines()
    clock = [1_800_000_000.0]
    shared = Shared(options=Options(token_key=b"k" * 32), clock=lambda: clock[0])
    shared._kube = KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(cluster.handle)))
    shared._http = httpx.AsyncClient(transport=httpx.MockTransport(engines.handle))
    loop = ControlLoop(shared, reads=cluster)

    async def step() -> None:
        clock[0] += 5
        engines.preemptions += 10.0  # 2 per second
        await loop.step(md, body, 5, logging.LoggerAdapter(logging.getLogger("kopf.objects")))

    def outage_events() -> list[dict[str, Any]]:
        return [e for e in cluster.writes_to("/events") if e["reason"] == "APIUnavailable"]

    await step()
    assert loop.state is not None and loop.state.tuner is not None
    kept = loop.state
    assert kept.tuner.budgets == Budgets(48, 2048)

    cluster.down = True  # the tuner's next change (48 -> 36) cannot reach the ConfigMap
    for _ in range(3):
        await step()
    assert loop.outage is not None and loop.outage.skipped == 3
    assert "All connection attempts failed" in loop.outage.last_error
    # The policies stay at the last decision carried out: a tuner that believed in a budget the ConfigMap never
    # got would start over from the ConfigMap's at the next decision, forgetting the storm.
    assert loop.state is kept
    assert cluster.deploy["spec"]["replicas"] == 2

    cluster.down = False
    await step()
    assert loop.outage is None
    assert cluster.cm is not None and children.budgets_from_config_map(cluster.cm["data"]) == Budgets(36, 2048)
    (status,) = [b["status"] for b in cluster.writes_to("/modeldeployments/m/status")][-1:]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "APIUnavailable")
    assert "3 decisions skipped" in degraded["message"] and "kept 2 replicas and budgets 48/2048" in degraded["message"]
    (event,) = outage_events()
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "APIUnavailable", degraded["message"])

    await step()  # reported once: the next decision sets Degraded from the metrics again
    status = cluster.writes_to("/modeldeployments/m/status")[-1]["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "MetricsAvailable")
    assert len(outage_events()) == 1
    await shared.aclose()


def test_kopf_retries_its_requests_for_as_long_as_the_api_server_is_away() -> None:
    """kopf gives a request up once its backoffs run out, and a watch given up on a 5xx is not restarted: the
    operator's backoffs never run out, and each request starts from the first step (kopf iterates afresh)."""
    settings = kopf.OperatorSettings()
    handlers.configure(settings=settings, memo=kopf.Memo(shared=Shared()))
    backoffs = settings.networking.error_backoffs
    assert not isinstance(backoffs, float | int) and not isinstance(backoffs, Sized)  # kopf counts no last attempt
    first = list(itertools.islice(backoffs, 1000))
    assert len(first) == 1000 and max(first) == 10.0 and sum(first) > 3600  # retrying through an hour's outage
    assert list(itertools.islice(backoffs, 3)) == first[:3]


async def test_a_proxy_page_in_front_of_the_api_server_is_an_api_error_not_a_crash() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html><body>502 Bad Gateway</body></html>")

    kube = KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(handler)))
    with pytest.raises(ApiError) as raised:
        await kube.get("/api/v1/namespaces/ns/pods")
    await kube.aclose()
    assert raised.value.code == 502 and "Bad Gateway" in raised.value.message
    assert api_outage.is_unavailable(raised.value)
