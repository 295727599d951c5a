"""Makes an engine's ``/metrics`` or ``/admin/budgets`` misbehave on demand, for the operator-under-faults tests.

An engine started with this folder on ``PYTHONPATH`` and ``PAGED_TEST_FAULTS`` naming a file reads that file on
each such request: a line ``metrics=garbage`` answers ``/metrics`` with text no Prometheus parser accepts,
``metrics=hang`` never answers it, ``budgets=hang`` never answers a budget push. An empty file: no fault.
Processes without the variable (the operator, the engine core) are left alone.
"""

from __future__ import annotations

import os


def _install(path: str) -> None:
    import asyncio

    from paged_engine.server import app as app_module

    def faults() -> set[str]:
        try:
            with open(path) as f:
                return {line.strip() for line in f if line.strip()}
        except FileNotFoundError:
            return set()

    def with_faults(build):  # type: ignore[no-untyped-def]
        def build_with_faults(*args, **kwargs):  # type: ignore[no-untyped-def]
            inner = build(*args, **kwargs)

            async def app(scope, receive, send):  # type: ignore[no-untyped-def]
                if scope["type"] == "http":
                    active, route = faults(), (scope["method"], scope["path"])
                    if route == ("GET", "/metrics") and "metrics=garbage" in active:
                        await send({"type": "http.response.start", "status": 200,
                                "headers": [(b"content-type", b"text/plain")]})  # fmt: skip
                        await send(
                            {"type": "http.response.body", "body": b"paged_kv_cache_usage_ratio{ {{ not metrics\n"}
                        )
                        return
                    if (route == ("GET", "/metrics") and "metrics=hang" in active) or (
                        route == ("PUT", "/admin/budgets") and "budgets=hang" in active
                    ):
                        await asyncio.sleep(3600)
                await inner(scope, receive, send)

            return app

        return build_with_faults

    # the public app (/metrics) and the admin port's app (/admin/budgets, with --admin-port as in pods)
    app_module.build_app = with_faults(app_module.build_app)
    app_module.build_admin_app = with_faults(app_module.build_admin_app)


if _path := os.environ.get("PAGED_TEST_FAULTS"):
    _install(_path)
