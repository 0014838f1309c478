"""Issue 11.2: a trace file is untrusted input; every malformed one is a TraceFormatError.

The issue's reproducers each had a raw error without a line number (a 400-digit number:
``OverflowError``; deep nesting: ``RecursionError``; a non-UTF-8 file:
``UnicodeDecodeError``), or were accepted and crashed replay, the overlay or the
timeline later (values of the wrong type, impossible state names); a 100 MB line was
read whole. Each now names its line, and nothing bad gets past reading.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hardening_calls import recorded

from turnfsm import Trace, TraceFormatError, TraceWriter, TurnController
from turnfsm import trace as trace_module
from turnfsm.trace import MAX_LINE_BYTES


def good_lines() -> list[str]:
    return recorded(3).to_jsonl().splitlines()


def with_line(number: int, text: str) -> list[str]:
    lines = good_lines()
    lines[number - 1] = text
    return lines


def edited(number: int, change: dict[str, object], where: str = "") -> list[str]:
    """The good trace with keys of line ``number`` (of its event if ``where="event"``) set."""
    record = json.loads(good_lines()[number - 1])
    (record[where] if where else record).update(change)
    return with_line(number, json.dumps(record))


CASES: dict[str, tuple[list[str], str]] = {
    "400-digit number": (with_line(4, '{"at": ' + "9" * 400 + "}"), "number out of range"),
    "huge float": (with_line(4, '{"at": 1e400}'), "number out of range: 1e400"),
    "NaN": (with_line(4, '{"at": NaN}'), "NaN is not a number a trace holds"),
    "Infinity": (edited(4, {"at": "x"}) and with_line(4, '{"at": -Infinity}'), "-Infinity"),
    "deep nesting": (with_line(4, "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    "lone surrogate": (edited(8, {"speech_id": "\ud800"}, "event"), "lone surrogate"),
    "text as a number": (edited(5, {"text": 42}, "event"), ".text must be a string, got 42"),
    "flag as a string": (
        edited(4, {"name": "session_error", "message": "x", "recoverable": "no"}, "event"),
        "SessionError.recoverable must be True or False, got 'no'",
    ),
    "time as a bool": (edited(4, {"at": True}), "at must be the event's time"),
    "step time not the event's": (edited(4, {"at": 99.0}), "at must be the event's time"),
    "negative time": (edited(4, {"at": -1.0}, "event"), "at must be >= 0"),
    "unknown state": (edited(4, {"after": "dancing"}), "after: unknown state 'dancing'"),
    "state with a newline": (edited(4, {"before": "listening\n%% x"}), "before: unknown state"),
    "event name not a string": (edited(4, {"name": ["x"]}, "event"), "unknown event ['x']"),
    "effect of the wrong shape": (edited(4, {"effects": ["start_timer"]}), "must be an object"),
    "timer of an effect": (
        edited(4, {"effects": [{"name": "start_timer", "timer": "lunch", "seconds": 1.0}]}),
        "StartTimer.timer must be one of",
    ),
    "seconds of an effect": (
        edited(4, {"effects": [{"name": "start_timer", "timer": "idle", "seconds": "8"}]}),
        "StartTimer.seconds must be a number",
    ),
    "unknown step key": (edited(4, {"extra": 1}), "step has unknown keys ['extra']"),
    "header version": (
        edited(1, {"turnfsm_trace": True}),
        "turnfsm_trace must be 1 or 2 or 3 or 4 or 5, got True",
    ),
    "header policy value": (edited(1, {"policy": {"max_tool_steps": "3"}}), "max_tool_steps"),
    "header unknown key": (edited(1, {"secret": 1}), "header: unknown keys ['secret']"),
    "dropped steps": (edited(1, {"dropped_steps": -3}), "dropped_steps must be an integer"),
    "too long a line": (with_line(3, " " * (MAX_LINE_BYTES + 1)), "longer than"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_trace_is_a_format_error_naming_its_line(case: str) -> None:
    lines, message = CASES[case]
    bad = next(n for n, (a, b) in enumerate(zip(lines, good_lines(), strict=True), 1) if a != b)
    with pytest.raises(TraceFormatError, match=rf"^line {bad}: ") as error:
        Trace.parse(lines)
    assert message in str(error.value)


def test_a_non_utf8_file_names_its_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    lines = good_lines()
    lines[2] = lines[2].replace('"ringing"', '"ring\xe9ng"')
    assert "\xe9" in lines[2]
    path.write_bytes("\n".join(lines[:2]).encode() + b"\n" + lines[2].encode("latin-1") + b"\n")
    with pytest.raises(TraceFormatError, match=r"^line 3: not UTF-8 text \(byte 0xe9 at column"):
        Trace.read(path)


def test_a_huge_line_is_refused_without_being_held(tmp_path: Path) -> None:
    """A 20 MB line used to be read whole (a 100 MB one took ~280 MB): now reading stops
    after the limit, holding about that much."""
    path = tmp_path / "huge.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        stream.write(good_lines()[0] + "\n")
        stream.write('{"at": "' + "x" * 20_000_000 + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(
            TraceFormatError, match=rf"^line 2: longer than {MAX_LINE_BYTES} bytes"
        ):
            Trace.read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE_BYTES


def test_a_file_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "call.jsonl"
    recorded(3).write(path)
    size = path.stat().st_size
    assert len(Trace.read(path, max_bytes=size)) > 0
    with pytest.raises(TraceFormatError, match=f"larger than {size - 1} bytes"):
        Trace.read(path, max_bytes=size - 1)
    assert trace_module.MAX_TRACE_BYTES >= 100 * size


def test_a_lone_surrogate_never_reaches_a_file_written_by_us(tmp_path: Path) -> None:
    """Reading refuses what writing cannot encode: the round trip stays closed."""
    trace = recorded(2, keep_text=True)
    path = tmp_path / "call.jsonl"
    trace.write(path)
    assert Trace.read(path) == trace


def test_a_trace_writer_streams_a_readable_trace(tmp_path: Path) -> None:
    path = tmp_path / "streamed.jsonl"
    with TraceWriter(path) as writer:
        controller = TurnController(recorded(1).policy, trace_sink=writer)
        for step in recorded(5):
            controller.handle(step.event)
            assert len(Trace.read(path)) == writer.steps  # readable at every moment
    assert Trace.read(path) == controller.trace


def _padded(line: str, size: int) -> str:
    """``line`` (a JSON object) padded with spaces to ``size`` bytes."""
    return line + " " * (size - len(line.encode("utf-8")))


@pytest.mark.parametrize("newline", ["\n", ""])
def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_not(
    tmp_path: Path, newline: str
) -> None:
    """Issue 22: the limit is the longest line read, its newline aside; a line of
    exactly ``MAX_LINE_BYTES`` bytes was refused (from a file) and accepted one byte
    past it when its newline was counted (``Trace.parse``)."""
    lines = good_lines()
    last = len(lines) - 1
    for size, readable in ((MAX_LINE_BYTES, True), (MAX_LINE_BYTES + 1, False)):
        lines[last] = _padded(good_lines()[last], size)
        path = tmp_path / "call.jsonl"
        path.write_text("\n".join(lines) + newline, encoding="utf-8")
        texts = [line + "\n" for line in lines]
        for source in (path, texts):
            read = Trace.read if isinstance(source, Path) else Trace.parse
            if readable:
                assert len(read(source)) == len(lines) - 1  # type: ignore[arg-type]
            else:
                with pytest.raises(TraceFormatError, match=f"^line {last + 1}: longer than"):
                    read(source)  # type: ignore[arg-type]


def _streamed(path: Path) -> Trace:
    with TraceWriter(path) as writer:
        controller = TurnController(recorded(1).policy, keep_text=True, trace_sink=writer)
        for step in recorded(5, keep_text=True):
            controller.handle(step.event)
    assert controller.trace is not None
    return controller.trace


@pytest.mark.parametrize("cut", [1, 7, "in a character"])
def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, cut: object) -> None:
    """Issue 22: a writer that dies mid-line leaves the last line cut short (no newline);
    the module promises a crash loses at most the step being written, yet the whole
    trace was refused. Now that line alone is skipped, and the trace says so."""
    path = tmp_path / "call.jsonl"
    whole = _streamed(path)
    data = path.read_bytes()
    last_start = data.rindex(b"\n", 0, len(data) - 1) + 1
    if cut == "in a character":
        data = data[:-1] + '"é€'.encode()[:-1]  # a step cut inside a UTF-8 character
    else:
        data = data[: last_start + int(cut)]  # type: ignore[call-overload]
    path.write_bytes(data)
    read = Trace.read(path)
    assert read.steps == whole.steps[:-1]
    assert read.torn_line == len(whole.steps) + 1
    assert "cut short" in read.warnings()[0]


def test_a_bad_last_line_that_was_written_whole_is_still_an_error(tmp_path: Path) -> None:
    """Only a line without its newline was cut short by a crash; one written whole and
    wrong is a malformed trace."""
    path = tmp_path / "call.jsonl"
    _streamed(path)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 5] + b"\n")
    with pytest.raises(TraceFormatError, match=r"^line \d+: "):
        Trace.read(path)


def test_a_torn_header_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "call.jsonl"
    path.write_bytes(good_lines()[0].encode()[:40])
    with pytest.raises(TraceFormatError, match="^line 1: cut short"):
        Trace.read(path)
