"""Issue 13, point 5: ``turnfsm report`` streams its input: the memory it uses does not
grow with the number of traces (tracemalloc's peak over 5,000 traces against 250).

A memory figure, not a timing: the run's duration is not asserted.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from simcalls import simulated_traces

from turnfsm.cli import main

DISTINCT = 50
"""Distinct calls; the 5,000 files repeat them (what is measured is the folding)."""


def _peak_bytes(folder: Path, out: Path) -> int:
    tracemalloc.start()
    try:
        assert main(["report", str(folder), "-o", str(out)]) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_over_5000_traces(tmp_path: Path, summary_line: object) -> None:
    texts = [trace.to_jsonl() for trace in simulated_traces(DISTINCT)]
    peaks = {}
    for count in (250, 5000):
        folder = tmp_path / str(count)
        folder.mkdir()
        for number in range(count):
            (folder / f"call-{number:05d}.jsonl").write_text(texts[number % DISTINCT])
        peaks[count] = _peak_bytes(folder, tmp_path / f"report-{count}.html")
        assert f'<b data-figure="calls">{count}</b>' in (
            tmp_path / f"report-{count}.html"
        ).read_text(encoding="utf-8")
    summary_line(  # type: ignore[operator]
        f"report memory: tracemalloc peak {peaks[250] / 1e3:.0f} kB over 250 traces, "
        f"{peaks[5000] / 1e3:.0f} kB over 5000"
    )
    # 20x the traces: growing with them would be ~20x; allow one-off interpreter caches
    assert peaks[5000] < 2 * peaks[250], peaks
    assert peaks[5000] < 2_000_000, peaks
