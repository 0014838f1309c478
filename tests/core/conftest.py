"""Core suite glue: deep tests run only under ``make test-deep`` (TURNFSM_DEEP=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def deep() -> bool:
    """Whether this is a deep run (``make test-deep``)."""
    return os.environ.get("TURNFSM_DEEP") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect this directory's ``deep`` tests unless a deep run asks for them.

    Deselected, not skipped: the quick variants of the same checks run in ``make test``.
    """
    if deep() or "deep" in (config.option.markexpr or ""):
        return
    keep, drop = [], []
    for item in items:
        mine = HERE in Path(str(item.path)).parents
        (drop if mine and item.get_closest_marker("deep") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
