"""Events are aggregated: one series per (object, reason, type), its count bumped instead of new objects."""

from __future__ import annotations

import json
from typing import Any

import httpx
from paged_operator.clients.kube import KubeApi, event_name

OWNER = {
    "apiVersion": "paged.dev/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
}
EVENTS = "/api/v1/namespaces/ns/events"


class FakeEvents:
    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request.method)
        name = request.url.path.removeprefix(EVENTS).strip("/")
        if request.method == "POST":
            body = json.loads(request.content)
            if body["metadata"]["name"] in self.events:
                return httpx.Response(409, json={"reason": "AlreadyExists"})
            self.events[body["metadata"]["name"]] = body
            return httpx.Response(201, json=body)
        if name not in self.events:
            return httpx.Response(404, json={"reason": "NotFound"})
        if request.method == "PATCH":
            self.events[name].update(json.loads(request.content))
        return httpx.Response(200, json=self.events[name])


def api(fake: FakeEvents) -> KubeApi:
    return KubeApi(httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(fake.handler)))


async def test_a_repeating_event_is_one_series_with_a_count() -> None:
    fake = FakeEvents()
    kube = api(fake)
    for i in range(3):
        await kube.post_event(OWNER, reason="BudgetPushFailed", message=f"pod-{i}: refused", warning=True)
    await kube.post_event(OWNER, reason="Scaled", message="1 -> 2")
    (failed,) = [e for e in fake.events.values() if e["reason"] == "BudgetPushFailed"]
    assert failed["count"] == 3 and failed["message"] == "pod-2: refused" and failed["type"] == "Warning"
    assert len(fake.events) == 2  # another reason is another series
    assert fake.calls == ["POST", "PATCH", "PATCH", "POST"]  # known series: one PATCH, no read
    await kube.aclose()


async def test_a_restarted_operator_continues_the_series_and_an_expired_one_starts_again() -> None:
    fake = FakeEvents()
    first = api(fake)
    await first.post_event(OWNER, reason="ReconcileFailed", message="a", warning=True)
    await first.post_event(OWNER, reason="ReconcileFailed", message="b", warning=True)
    await first.aclose()
    restarted = api(fake)  # nothing cached: the create is refused, the series is read and bumped
    await restarted.post_event(OWNER, reason="ReconcileFailed", message="c", warning=True)
    name = event_name("m", "u1", "ReconcileFailed", "Warning")
    assert fake.events[name]["count"] == 3
    fake.events.clear()  # the API server's Event TTL passed
    await restarted.post_event(OWNER, reason="ReconcileFailed", message="d", warning=True)
    assert fake.events[name]["count"] == 1 and fake.events[name]["message"] == "d"
    await restarted.aclose()
