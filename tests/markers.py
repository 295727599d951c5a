"""What a test needs is what its marks say (pyproject's ``markers``): ``-m "not k8s"`` and the like select on them,
so a test that needs the control plane, the real node, the Gemma 3 270M weights or an engine server without the
matching mark runs where it cannot, or is left out where it should not be.

Checked from the fixtures each collected test uses (a missing mark is a usage error, as an unknown one is under
``--strict-markers``), and by :func:`require_mark` where a test starts something itself (an engine server).
"""

from __future__ import annotations

import pytest

# A fixture (used directly or through other fixtures) and the mark a test using it must carry.
FIXTURE_MARKS = {
    "kube_binaries": "k8s",  # the control plane's binaries, helm and promtool (built from Go modules)
    "kube_node_binaries": "node",  # kubelet, kube-proxy, kubectl, CoreDNS
    "kube_node": "node",  # the real node (root, namespaces, containerd)
    "images": "node",  # the container images (docker or podman)
    "gemma_gguf": "gemma",  # the real Gemma 3 270M GGUF
    "tiny_gemma_dir": "gemma",  # the tiny Gemma takes its tokenizer from the real Gemma 3 270M's converted folder
}

_running: list[pytest.Item] = []


def unmarked_needs(item: pytest.Item) -> list[str]:
    """``"mark (fixture)"`` for each fixture ``item`` uses whose mark it does not carry."""
    fixtures = getattr(item, "fixturenames", ())
    return [
        f"{mark} ({fixture})"
        for fixture, mark in FIXTURE_MARKS.items()
        if fixture in fixtures and item.get_closest_marker(mark) is None
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [f"{item.nodeid}: {', '.join(needs)}" for item in items if (needs := unmarked_needs(item))]
    if missing:
        raise pytest.UsageError(
            "tests that use these fixtures must carry the marks named (pyproject.toml's markers):\n"
            + "\n".join(missing)
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running[:] = [item]  # before its fixtures are set up, so a fixture starting a server sees its test


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _running.clear()


def require_mark(mark: str, what: str) -> None:
    """Fail the running test unless it carries ``mark``; ``what`` says what it did that needs it. Outside a test
    (a script reusing the helper) there is nothing to check."""
    if _running and _running[0].get_closest_marker(mark) is None:
        pytest.fail(f"{_running[0].nodeid} {what}: mark it @pytest.mark.{mark}", pytrace=False)
