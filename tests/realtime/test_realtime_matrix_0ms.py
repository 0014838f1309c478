"""Issue 19's matrix at 0 ms one-way latency: 144 cells (``support.realtime_matrix``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.realtime_matrix import LATENCIES_MS, Cell, cells, run_cell


@pytest.mark.parametrize("cell", cells(latency_ms=0), ids=str)
async def test_matrix_cell(cell: Cell) -> None:
    await run_cell(cell)


def test_the_matrix_modules_hold_every_cell() -> None:
    """One module per latency, 144 cells each: the 432 of issue 19."""
    here = Path(__file__).parent
    for latency in LATENCIES_MS:
        assert (here / f"test_realtime_matrix_{latency}ms.py").exists()
    assert len({cell for latency in LATENCIES_MS for cell in cells(latency)}) == 432
