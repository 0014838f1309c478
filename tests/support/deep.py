"""``make test-deep``: the long variants of checks whose quick variants run in ``make test``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def deep() -> bool:
    """Whether this is a deep run (``make test-deep``: TURNFSM_DEEP=1)."""
    return os.environ.get("TURNFSM_DEEP") == "1"


def deselect_deep(config: pytest.Config, items: list[pytest.Item], directory: Path) -> None:
    """Deselect the ``deep`` tests under ``directory`` unless a deep run asks for them.

    Deselected, not skipped: the quick variants of the same checks run in ``make test``.
    """
    if deep() or "deep" in (config.option.markexpr or ""):
        return
    keep, drop = [], []
    for item in items:
        mine = directory in Path(str(item.path)).parents
        (drop if mine and item.get_closest_marker("deep") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
