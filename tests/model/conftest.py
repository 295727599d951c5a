"""Shared fixtures for the model tests: one torch thread (tiny shapes; the CI box is shared)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _single_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
