"""Issue 11.3: the renderers always finish, and every string from a trace is made safe.

Reproducers: ``turnfsm timeline`` never finished on a 1.5 KB trace with one backward
time jump (a nudge loop adding 9 px at x ~ 1e21), took 146 s for 2,000 effects at one
instant (cubic), and the SVG broke on a control character or a lone surrogate in a speech
id; a trace's state names went raw into the Mermaid overlay and to stderr. The CLI
printed tracebacks for malformed files.

Run time is not asserted (benchmarks/ measures it): the renderings that used to hang run
in a subprocess whose timeout is a hang guard far above their time (about a second).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hardening_calls import POLICY, assert_safe_mermaid, call_events, recorded

from turnfsm import Trace, TraceStep, TurnController
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.tools.cli import main
from turnfsm.tools.diagram import build_diagram, to_mermaid
from turnfsm.tools.report import CallReport
from turnfsm.tools.timeline import render_timeline

HANG_GUARD = 120.0
"""Seconds after which a rendering counts as never finishing (it takes about one)."""


def run_cli(*args: str | Path) -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "turnfsm", *map(str, args)],
        capture_output=True,
        timeout=HANG_GUARD,
        check=False,
    )
    return done, time.perf_counter() - started


def step(at: float, event: ev.Event, *effects: fx.Effect, before: str = "listening") -> TraceStep:
    return TraceStep(at, event, before, before, effects)


def test_a_backward_time_jump_is_drawn_and_counted(
    tmp_path: Path, summary_line: Callable[[str], None]
) -> None:
    """The issue's 1.5 KB trace: a step far in the future with two effects, then a step
    back near the start (the axis used to end at 1 s, putting x at ~1e21)."""
    trace = Trace(
        policy=POLICY,
        steps=[
            step(0.0, ev.UserSpeechStarted(at=0.0)),
            step(1e18, ev.UserSpeechEnded(at=1e18), fx.ClearUserTurn(), fx.Interrupt()),
            step(0.5, ev.UserSpeechStarted(at=0.5), fx.ClearUserTurn()),
        ],
    )
    path = tmp_path / "jump.jsonl"
    trace.write(path)
    assert path.stat().st_size < 1500
    done, seconds = run_cli("timeline", path, "-o", tmp_path / "jump.svg")
    assert done.returncode == 0, done.stderr
    svg = (tmp_path / "jump.svg").read_text(encoding="utf-8")
    ElementTree.fromstring(svg)
    assert "1 backward time jump" in svg
    summary_line(f"timeline: a backward time jump drawn in {seconds:.2f} s (CLI, cold start)")


def test_two_thousand_effects_at_one_instant(
    tmp_path: Path, summary_line: Callable[[str], None]
) -> None:
    effects = tuple(fx.ClearUserTurn() for _ in range(2_000))
    trace = Trace(policy=POLICY, steps=[step(5.0, ev.UserSpeechEnded(at=5.0), *effects)])
    path = tmp_path / "burst.jsonl"
    trace.write(path)
    done, seconds = run_cli("timeline", path, "-o", tmp_path / "burst.svg")
    assert done.returncode == 0, done.stderr
    svg = ElementTree.fromstring((tmp_path / "burst.svg").read_bytes())
    titles = [g.findtext("{*}title") or "" for g in svg.iter("{http://www.w3.org/2000/svg}g")]
    assert sum("clear_user_turn" in title for title in titles) == 2_000
    summary_line(f"timeline: 2,000 effects at one instant drawn in {seconds:.2f} s (CLI)")


def test_a_two_hour_call_draws_and_overlays(
    tmp_path: Path, summary_line: Callable[[str], None]
) -> None:
    controller = TurnController(POLICY, max_trace_steps=None)
    for event in call_events(1_200):  # 1,200 exchanges of 6 s: two hours
        controller.handle(event)
    assert controller.trace is not None
    path = tmp_path / "two_hours.jsonl"
    controller.trace.write(path)
    done, timeline_s = run_cli("timeline", path, "-o", tmp_path / "two_hours.svg")
    assert done.returncode == 0, done.stderr
    ElementTree.fromstring((tmp_path / "two_hours.svg").read_bytes())
    done, overlay_s = run_cli("diagram", "--trace", path, "-o", tmp_path / "two_hours.mmd")
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    summary_line(
        f"two-hour call ({len(controller.trace)} steps): timeline {timeline_s:.1f} s, "
        f"overlay {overlay_s:.1f} s (CLI, cold start)"
    )


HOSTILE_IDS = [
    "s\x01",
    "s\u202egpj.exe",
    "s\u2028",
    "s\ufffe",
    "s\x1b[2J",
    "<script>alert(1)</script>",
    "]]>",
]
"""(A lone surrogate is refused when the event is built: test_accepted_is_written.py.)"""


@pytest.mark.parametrize("speech_id", HOSTILE_IDS)
def test_the_svg_is_valid_xml_whatever_a_speech_id_holds(speech_id: str) -> None:
    controller = TurnController(POLICY, keep_text=True)
    for event in [
        ev.CallAnswered(at=0.0),
        ev.UserTurnCommitted(at=1.0, text=f"hello {speech_id}", item_id=speech_id),
        ev.AgentSpeechCreated(at=1.1, speech_id=speech_id, source="say"),
        ev.AgentSpeechStarted(at=1.2, speech_id=speech_id),
        ev.AgentSpeechEnded(at=3.0, speech_id=speech_id, interrupted=True),
    ]:
        controller.handle(event)
    assert controller.trace is not None
    svg = render_timeline(controller.trace)
    root = ElementTree.fromstring(svg.encode("utf-8"))  # encodable, and valid XML
    assert not any(element.tag.endswith("script") for element in root.iter())
    titles = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title"))
    assert "LockSpeech" in titles or "lock_speech" in titles


def test_state_names_cannot_inject_mermaid_or_terminal_escapes() -> None:
    """A trace built in code (a file cannot hold unknown states) whose steps claim
    states with newlines, Mermaid syntax and escape sequences: the overlay warns, in
    text that stays one comment line."""
    hostile = "listening\n    ended --> [*]\n    click ended call alert()\n\x1b[2J"
    trace = recorded(1)
    trace.steps[3] = TraceStep(
        trace.steps[3].at, trace.steps[3].event, hostile, hostile, trace.steps[3].effects
    )
    diagram = build_diagram(trace=trace)
    assert diagram.warnings
    mermaid = to_mermaid(diagram)
    assert_safe_mermaid(mermaid)
    assert "click ended" not in "\n".join(
        line for line in mermaid.splitlines() if not line.lstrip().startswith("%%")
    )


# -- the CLI: one line, never a traceback -------------------------------------------------

BAD_FILES: dict[str, bytes] = {
    "deep nesting": b"[" * 200_000 + b"]" * 200_000 + b"\n",
    "a 400-digit number": b'{"turnfsm_trace": ' + b"9" * 400 + b"}\n",
    "not UTF-8": b'{"turnfsm_trace": 1, "policy": {"greeting": "\xe9"}}\n',
    "binary": bytes(range(256)) * 4,
    "empty": b"",
    "escape in a name": (
        recorded(1).header().encode()
        + b'\n{"at": 0.0, "before": "ringing", "after": "ringing", "effects": [], '
        + b'"event": {"at": 0.0, "name": "\\u001b[2Jboom"}}\n'
    ),
}


@pytest.mark.parametrize("command", ["timeline", "diagram"])
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_the_cli_reports_a_bad_trace_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, command: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(BAD_FILES[case])
    args = [command, str(path)] if command == "timeline" else [command, "--trace", str(path)]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("turnfsm: error: ")
    assert "Traceback" not in captured.err
    assert "\x1b" not in captured.err


def test_the_cli_reports_a_directory_or_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["timeline", str(tmp_path)]) == 1
    assert main(["timeline", str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err.count("turnfsm: error: cannot read") == 2


@pytest.mark.parametrize(
    "times",
    [(0.0, 1.7e308), (1.7e308, 1.79e308), (0.0, 1.7976931348623157e308)],
    ids=["from 0", "both huge", "the largest float"],
)
def test_times_near_the_largest_float_are_drawn_and_reported(times: tuple[float, float]) -> None:
    """Issue 22: the timeline crashed (``OverflowError``) for times near 1.7e308; the
    report summed such durations with ``fsum``, which raises on overflow."""
    controller = TurnController(POLICY)
    controller.handle(ev.CallAnswered(at=times[0]))
    controller.handle(ev.UserTurnCommitted(at=times[0], text="Hello?", item_id="u1"))
    controller.handle(ev.CallEnded(at=times[1]))
    assert controller.trace is not None
    svg = render_timeline(controller.trace)
    root = ElementTree.fromstring(svg.encode("utf-8"))
    assert "inf" not in svg
    assert "nan" not in svg
    assert float(root.get("data-duration", "")) == times[1] - times[0]
    report = CallReport()
    report.add(controller.trace)
    report.add(controller.trace)
    assert report.render().startswith("<!DOCTYPE html>")
