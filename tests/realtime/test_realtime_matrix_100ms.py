"""Issue 19's matrix at 100 ms one-way latency: 144 cells (``support.realtime_matrix``)."""

from __future__ import annotations

import pytest

from support.realtime_matrix import Cell, cells_to_run, run_cell


@pytest.mark.parametrize("cell", cells_to_run(100), ids=str)
async def test_matrix_cell(cell: Cell) -> None:
    await run_cell(cell)
