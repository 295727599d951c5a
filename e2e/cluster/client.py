"""A small synchronous Kubernetes REST client for tests: raw API paths and JSON bodies, so a test reads like the
HTTP exchange it checks, and API errors surface with the server's own status and message."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx

from .kubeconfig import Credentials

T = TypeVar("T")

JSON_MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class ApiError(RuntimeError):
    """A non-2xx answer from the API server; ``status`` is the Status object it returned (reason, message, details)."""

    def __init__(self, method: str, path: str, code: int, status: dict[str, Any]) -> None:
        self.code = code
        self.status = status
        self.reason: str = status.get("reason", "")
        self.message: str = status.get("message", "")
        super().__init__(f"{method} {path} -> {code} {self.reason}: {self.message}")


class KubeClient:
    def __init__(self, credentials: Credentials, timeout_s: float = 30.0) -> None:
        self.credentials = credentials
        self._http = httpx.Client(
            base_url=credentials.server,
            verify=ssl.create_default_context(cafile=credentials.ca_cert),
            headers={"Authorization": f"Bearer {credentials.token}", "Accept": "application/json"},
            timeout=timeout_s,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        response = self._http.request(
            method,
            path,
            json=body,
            params=params,
            headers={"Content-Type": content_type} if body is not None else None,
        )
        data = response.json() if response.content else {}
        if response.is_error:
            raise ApiError(method, path, response.status_code, data if isinstance(data, dict) else {"message": data})
        return data

    def get(self, path: str, **params: str) -> dict[str, Any]:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body)

    def patch(
        self, path: str, body: Mapping[str, Any] | list[Any], content_type: str = JSON_MERGE_PATCH
    ) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=content_type)

    def apply(self, path: str, body: Mapping[str, Any], field_manager: str, *, force: bool = False) -> dict[str, Any]:
        """Server-side apply of ``body`` to the object at ``path`` (the object's own URL, not its collection)."""
        params = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        return self.request("PATCH", path, body, params=params, content_type=APPLY_PATCH)

    def delete(self, path: str, propagation: str = "Background") -> dict[str, Any]:
        return self.request("DELETE", path, {"propagationPolicy": propagation})

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True


def has_condition(obj: Mapping[str, Any], condition: str, status: str = "True") -> bool:
    """Whether ``obj.status.conditions`` has ``condition`` at ``status``; a status or condition list the server has not
    filled in yet (absent or null, as for a CRD just created) counts as not having it."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition and c.get("status") == status for c in conditions)


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = 60.0, interval_s: float = 0.2) -> T:
    """Poll ``check`` until it returns something other than None/False, and return that. On timeout the error says
    what was awaited and the last value or exception seen."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
        except (ApiError, httpx.HTTPError) as exc:
            value, last = None, exc
        else:
            last = value
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {last!r}")
        time.sleep(interval_s)
