"""Shared pytest configuration."""

from __future__ import annotations

import os
import shutil

import pytest

# Keep generated code single-threaded unless a test asks otherwise: CI has 2 cores and tests run
# one process; oversubscription makes timing-free tests slow and flaky.
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "2")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shutil.which("nvcc") is None:
        skip = pytest.mark.skip(reason="nvcc is not on PATH")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
