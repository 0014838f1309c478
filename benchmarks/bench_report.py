"""The report across calls: what folding a trace costs next to reading it, and memory
that stays flat as traces are added (issue 13, point 5).

Every trace is the scripted outbound call (:mod:`benchmarks.callscript`), written as JSON
lines and read back, as ``turnfsm report`` does for each file.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

from turnfsm import Trace, TurnController
from turnfsm.tools.metrics import call_metrics
from turnfsm.tools.report import CallReport

from .callscript import POLICY, scripted_call
from .harness import Config, Row, Section, gc_paused, ratio, rounds_of, verdict

MEMORY_GROWTH_TARGET = 1.5
"""Peak memory of a report over 10× the traces, as a multiple of the smaller one's. Not
1×: the interpreter's free lists (small tuples, floats) fill up to their fixed sizes over
the first thousand traces; ``tests/report`` sees 1.1× from 250 to 5,000 traces."""


def _trace_text() -> str:
    controller = TurnController(POLICY)
    for event in scripted_call():
        controller.handle(event)
    assert controller.trace is not None
    return controller.trace.to_jsonl()


def _peak_kib(text: str, traces: int) -> float:
    tracemalloc.start()
    try:
        report = CallReport()
        for _ in range(traces):
            report.add(Trace.parse(text.splitlines()))
        report.render()
        return tracemalloc.get_traced_memory()[1] / 1024
    finally:
        tracemalloc.stop()


def report(config: Config) -> Section:
    text = _trace_text()
    trace = Trace.parse(text.splitlines())
    count = config.scaled(200)

    def per_trace(work: Callable[[], object]) -> Callable[[], float]:
        def case() -> float:
            with gc_paused():
                start = time.perf_counter()
                for _ in range(count):
                    work()
                return (time.perf_counter() - start) / count * 1e6

        return case

    folded = CallReport()
    samples = rounds_of(
        {
            "read a trace": per_trace(lambda: Trace.parse(text.splitlines())),
            "per-call metrics": per_trace(lambda: call_metrics(trace)),
            "fold into the report": per_trace(lambda: folded.add(trace)),
        },
        config,
    )
    rows = [Row(case, values, "µs") for case, values in samples.items()]
    for row in rows[1:]:
        row.ratios = f"{ratio(row.times(rows[0]))} read"
    small, large = config.scaled(100), config.scaled(1000)
    memory = rounds_of(
        {
            f"peak, {small} traces": lambda: _peak_kib(text, small),
            f"peak, {large} traces": lambda: _peak_kib(text, large),
        },
        Config(rounds=1, quick=config.quick),
        warm_up=False,
    )
    small_row, large_row = (Row(f"memory: {c}", v, "KiB") for c, v in memory.items())
    growth = large_row.times(small_row)
    large_row.ratios = f"{ratio(growth)} {small} traces"
    large_row.target = verdict(growth <= MEMORY_GROWTH_TARGET, f"≤ {MEMORY_GROWTH_TARGET}×")
    return Section(
        "Report across calls",
        [*rows, small_row, large_row],
        [
            f"The scripted call ({len(trace)} steps): read from JSON lines, its metrics, and "
            f"folded into a report (metrics and moves), {count} times per round. Memory: "
            "tracemalloc's peak while a report folds that many traces and renders its page.",
        ],
    )


SECTIONS = [report]
"""Run by ``python -m benchmarks``."""
