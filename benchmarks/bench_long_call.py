"""A two-hour call: time per event stays flat, memory stays bounded, the trace streams.

The call is :func:`~benchmarks.callscript.scripted_call`'s conversation (everything
between the greeting and the hang-up: turns, a tool loop, an idle re-prompt, a barge-in)
repeated with fresh speech and item ids and shifted times until two hours have passed,
then the hang-up: about 20,000 events on a simulated clock.

Measured: CPU time per event in the first and in the last 10 minutes (default
controller: trace capped at ``max_trace_steps``, plus a :class:`~turnfsm.TraceWriter`
streaming every step to a file), what the streaming costs per event, the memory a
controller holds at the end of the call (tracemalloc: capped trace, unbounded trace, no
trace), and the time to read the streamed file back and draw its timeline.
"""

from __future__ import annotations

import tempfile
import time
import tracemalloc
from pathlib import Path

import attrs

from turnfsm import Trace, TraceWriter, TurnController
from turnfsm import events as ev
from turnfsm.controller import DEFAULT_MAX_TRACE_STEPS
from turnfsm.tools.timeline import render_timeline

from .callscript import POLICY, scripted_call
from .harness import Config, Row, Section, gc_paused, ratio, verdict

DEFAULT_RING_TARGET_KIB = 256.0
"""What a controller holds at the end of a long call with the default trace ring
(issue 23)."""

CALL_SECONDS = 2 * 3600.0
STRETCH = 600.0
"""Per-event times are compared between the first and the last 10 minutes."""

LONG_POLICY = attrs.evolve(POLICY, max_call_duration=3 * 3600.0)


def long_call(seconds: float = CALL_SECONDS) -> list[ev.Event]:
    """The scripted conversation repeated for ``seconds``, between its greeting and its
    hang-up; each repetition with its own ids."""
    script = scripted_call()
    greeted = next(i for i, e in enumerate(script) if isinstance(e, ev.AssistantMessageCommitted))
    opening, middle, ending = script[: greeted + 1], script[greeted + 1 : -1], script[-1]
    span = middle[-1].at - middle[0].at + 1.0
    events = list(opening)
    offset, repetition = 0.0, 0
    while middle[0].at + offset < seconds:
        renamed = {"speech_id", "item_id"}
        for event in middle:
            changes = {
                name: f"{getattr(event, name)}~{repetition}"
                for name in renamed
                if getattr(event, name, "")
            }
            events.append(attrs.evolve(event, at=event.at + offset, **changes))
        offset, repetition = offset + span, repetition + 1
    events.append(attrs.evolve(ending, at=events[-1].at + 1.0))
    return events


def _timed_call(events: list[ev.Event], *, stream: bool) -> tuple[float, float, float]:
    """µs of CPU per event: over the whole call, in its first and in its last
    :data:`STRETCH` seconds (default controller, with or without a TraceWriter)."""
    end = events[-1].at
    first: list[float] = []
    last: list[float] = []
    total = 0.0
    with tempfile.TemporaryDirectory() as folder:
        writer = TraceWriter(Path(folder) / "call.jsonl") if stream else None
        controller = TurnController(LONG_POLICY, trace_sink=writer)
        with gc_paused():
            for event in events:
                started = time.process_time()
                controller.handle(event)
                elapsed = time.process_time() - started
                total += elapsed
                if event.at < STRETCH:
                    first.append(elapsed)
                elif event.at >= end - STRETCH:
                    last.append(elapsed)
        if writer is not None:
            writer.close()
    return (
        total / len(events) * 1e6,
        sum(first) / len(first) * 1e6,
        sum(last) / len(last) * 1e6,
    )


def _held_kib(events: list[ev.Event], **options: object) -> float:
    """KiB tracemalloc sees held by a controller that ran the whole call."""
    tracemalloc.start()
    try:
        controller = TurnController(LONG_POLICY, **options)  # type: ignore[arg-type]
        for event in events:
            controller.handle(event)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del controller
    return held / 1024


def long_call_section(config: Config) -> Section:
    events = long_call(CALL_SECONDS if not config.quick else 1800.0)
    rounds = min(config.rounds, 3)
    plain = [_timed_call(events, stream=False) for _ in range(rounds)]
    streamed = [_timed_call(events, stream=True) for _ in range(rounds)]
    first = Row("handle, first 10 min (with TraceWriter)", [s[1] for s in streamed], "µs/event")
    last = Row("handle, last 10 min (with TraceWriter)", [s[2] for s in streamed], "µs/event")
    first.ratios = "1.00× first 10 min"
    last.ratios = f"{ratio(last.times(first))} first 10 min"
    last.target = f"flat: {ratio(last.times(first))}"
    without = Row("whole call, capped trace only", [s[0] for s in plain], "µs/event")
    with_sink = Row("whole call, capped trace + TraceWriter", [s[0] for s in streamed], "µs/event")
    without.ratios = "1.00× no sink"
    with_sink.ratios = f"{ratio(with_sink.times(without))} no sink"
    memory: dict[str, dict[str, object]] = {
        "held at the end: max_trace_steps=10,000": {"max_trace_steps": 10_000},
        f"held at the end: max_trace_steps={DEFAULT_MAX_TRACE_STEPS:,} (default)": {},
        "held at the end: max_trace_steps=None (unbounded)": {"max_trace_steps": None},
        "held at the end: record=False": {"record": False},
    }
    memory_rows = [Row(name, [_held_kib(events, **opts)], "KiB") for name, opts in memory.items()]
    unbounded = memory_rows[2]
    for row in memory_rows:
        row.ratios = f"{ratio(row.times(unbounded))} unbounded"
    default = memory_rows[1]
    default.target = verdict(
        default.median <= DEFAULT_RING_TARGET_KIB,
        f"≤ {DEFAULT_RING_TARGET_KIB:g} KiB; {default.median - DEFAULT_RING_TARGET_KIB:+.0f} KiB",
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "call.jsonl"
        with TraceWriter(path) as writer:
            controller = TurnController(LONG_POLICY, trace_sink=writer, record=False)
            for event in events:
                controller.handle(event)
        size = path.stat().st_size
        started = time.process_time()
        trace = Trace.read(path)
        read_s = time.process_time() - started
        started = time.process_time()
        svg = render_timeline(trace)
        draw_s = time.process_time() - started
    render_rows = [
        Row("Trace.read of the streamed file", [read_s], "s"),
        Row("render_timeline of the whole call", [draw_s], "s"),
    ]
    return Section(
        "Long call (2 h, simulated)",
        [first, last, without, with_sink, *memory_rows, *render_rows],
        [
            f"Long call: {len(events):,} events ({events[-1].at / 3600:.1f} h simulated, the "
            f"scripted conversation repeated), {rounds} rounds each with and without a "
            f"TraceWriter, CPU time. The streamed file is {size / 1e6:.1f} MB, "
            f"{len(trace):,} steps; its timeline {len(svg) / 1e6:.1f} MB of SVG. Memory: one "
            "run each, what tracemalloc sees a controller hold once the call is over "
            "(machine, context, trace).",
        ],
    )


SECTIONS = [long_call_section]
"""Run by ``python -m benchmarks``."""
