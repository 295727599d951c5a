"""``paged_engine.core`` must import on a machine without torch (the engine-core process, the operator, tests)."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = r"""
import importlib.abc
import pkgutil
import sys


class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is blocked in this test (import of {name!r})")
        return None


sys.meta_path.insert(0, BlockTorch())
import paged_engine.core

modules = [info.name for info in pkgutil.walk_packages(paged_engine.core.__path__, "paged_engine.core.")]
for name in modules:
    __import__(name)
assert "torch" not in sys.modules
print(len(modules), "modules")
"""


def test_core_imports_without_torch():
    result = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[0]) >= 10  # every core module was imported


def test_the_blocker_really_blocks_torch():
    code = BLOCKER.replace("import paged_engine.core", "import torch  # noqa")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "torch is blocked" in result.stderr
