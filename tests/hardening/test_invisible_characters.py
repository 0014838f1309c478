"""Issue 22: characters that change how a text reads while showing nothing never reach
an output raw.

The terminal escaper left bidirectional marks, the line and paragraph separators
(U+2028/9) and zero-width characters raw, and the HTML report left U+202E (right-to-left
override) raw: a speech id, an end reason or a file name could reorder or hide what a
reader sees. Every output (terminal lines, the timeline's SVG, Mermaid, the report's
HTML) now spells them as escapes.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.tools.cli import main
from turnfsm.tools.escape import UNPRINTABLE_RANGES, mermaid_text, printable, xml_text
from turnfsm.tools.report import CallReport
from turnfsm.tools.timeline import render_timeline
from turnfsm.trace import CallInfo

INVISIBLE = {
    "right-to-left override": "\u202e",
    "right-to-left isolate": "\u2067",
    "left-to-right mark": "\u200e",
    "arabic letter mark": "\u061c",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "word joiner": "\u2060",
    "zero-width no-break space": "\ufeff",
    "tag latin capital a": "\U000e0041",
    "cancel tag": "\U000e007f",
    "soft hyphen": "\u00ad",
}
HOSTILE = "call-" + "".join(INVISIBLE.values()) + "-end"
RAW = frozenset(INVISIBLE.values())


def test_the_ranges_cover_every_invisible_code_point_of_unicode() -> None:
    """Every control, format, surrogate and separator code point the running Python
    knows, and every non-character: a newer Unicode adding one fails here."""
    covered = {c for low, high in UNPRINTABLE_RANGES for c in range(low, high + 1)}
    wanted = {
        code
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        or (code & 0xFFFE) == 0xFFFE
        or 0xFDD0 <= code <= 0xFDEF
    }
    missing = sorted(wanted - covered)
    assert not missing, [f"U+{code:04X}" for code in missing[:20]]
    assert not {chr(code) for code in covered - wanted} - {"\ud800"}  # nothing else


@pytest.mark.parametrize("name", list(INVISIBLE))
def test_each_escaper_spells_it(name: str) -> None:
    character = INVISIBLE[name]
    for escape in (printable, xml_text, mermaid_text):
        out = escape(f"a{character}b")
        assert character not in out
        assert "\\" in out  # spelt, not dropped


def _hostile_call() -> TurnController:
    controller = TurnController(
        TurnPolicy(direction="outbound", greeting="Hi"),
        call=CallInfo(call_id=HOSTILE, agent_name=HOSTILE, started_at="2025-06-02T09:30:00Z"),
    )
    for event in (
        ev.CallAnswered(at=0.0),
        ev.UserTurnCommitted(at=1.0, text="Hello?", item_id=HOSTILE),
        ev.AgentSpeechCreated(at=1.1, speech_id=HOSTILE, source="say"),
        ev.AgentSpeechStarted(at=1.2, speech_id=HOSTILE),
        ev.AgentSpeechEnded(at=3.0, speech_id=HOSTILE),
        ev.CallEnded(at=4.0, reason=HOSTILE),
    ):
        controller.handle(event)
    return controller


def test_the_timeline_and_the_report_hold_none_raw() -> None:
    trace = _hostile_call().trace
    assert trace is not None
    assert not RAW & set(render_timeline(trace))
    report = CallReport()
    report.add(trace)
    page = report.render()
    assert "call-\\u202e" in page  # the id is there, spelt
    assert not RAW & set(page)


def test_a_terminal_line_holds_none_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / f"{HOSTILE}.jsonl"
    bad.write_text("not a trace\n", encoding="utf-8")
    assert main(["timeline", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "line 1" in err
    assert not RAW & set(err)
