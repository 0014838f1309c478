"""Issue 19's matrix at 0 ms one-way latency: 144 cells (``support.realtime_matrix``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.realtime_matrix import (
    CANCEL_DELAYS_MS,
    FAULTS,
    LATENCIES_MS,
    RATES,
    SYNCHRONIZER,
    TEXT_LEADS_MS,
    Cell,
    cells,
    cells_to_run,
    covering_cells,
    run_cell,
)


@pytest.mark.parametrize("cell", cells_to_run(0), ids=str)
async def test_matrix_cell(cell: Cell) -> None:
    await run_cell(cell)


def test_the_matrix_modules_hold_every_cell() -> None:
    """One module per latency, 144 cells each: the 432 of issue 19."""
    here = Path(__file__).parent
    for latency in LATENCIES_MS:
        assert (here / f"test_realtime_matrix_{latency}ms.py").exists()
    assert len({cell for latency in LATENCIES_MS for cell in cells(latency)}) == 432


def test_the_covering_subset_meets_every_value_of_every_axis_with_every_fault() -> None:
    covering = [cell for latency in LATENCIES_MS for cell in covering_cells(latency)]
    assert len(set(covering)) == 18
    assert {cell.latency_ms for cell in covering} == set(LATENCIES_MS)
    axes = {
        "cancel_ms": CANCEL_DELAYS_MS,
        "lead_ms": TEXT_LEADS_MS,
        "rate": RATES,
        "synchronizer": SYNCHRONIZER,
        "latency_ms": LATENCIES_MS,
    }
    for fault in FAULTS:
        with_fault = [cell for cell in covering if cell.fault == fault]
        for axis, values in axes.items():
            assert {getattr(cell, axis) for cell in with_fault} == set(values), (fault, axis)
