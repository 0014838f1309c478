"""Core suite glue: deep tests run only under ``make test-deep`` (TURNFSM_DEEP=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.deep import deselect_deep

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_deep(config, items, HERE)
