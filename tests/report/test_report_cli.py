"""``turnfsm report`` on the command line: folders and files, bad input named, never a
traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from simcalls import simulated_trace

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.cli import main
from turnfsm.report import build_report


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    traces = tmp_path / "traces"
    traces.mkdir()
    for number in range(3):
        simulated_trace(number).write(traces / f"call-{number}.jsonl")
    (traces / "notes.txt").write_text("not a trace", encoding="utf-8")
    return traces


def test_a_folder_and_files_are_read(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    extra = folder / "call-0.jsonl"
    assert main(["report", str(folder), str(extra), "-o", str(out)]) == 0
    assert '<b data-figure="calls">4</b> calls' in out.read_text(encoding="utf-8")


def test_the_page_goes_to_stdout(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")


def test_unreadable_traces_are_skipped_and_listed(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = '{"turnfsm_trace": 1, "policy": {"greeting": "Hi"}}'
    (folder / "broken.jsonl").write_text(header + '\n{"at": 1}\n', encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "broken.jsonl" in err
    assert "line 2" in err
    page = out.read_text(encoding="utf-8")
    assert '<b data-figure="unreadable">1</b> unreadable traces skipped' in page
    assert "broken.jsonl: line 2: step is missing" in page


def test_no_readable_trace_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["report", str(missing), "-o", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert "cannot read" in err
    assert "no readable trace among 1 file(s)" in err
    assert not (tmp_path / "r.html").exists()


def test_the_output_must_be_html(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(folder), "-o", str(tmp_path / "report.pdf")]) == 1
    assert "name the output *.html" in capsys.readouterr().err


def _short_call(policy: TurnPolicy) -> Trace:
    controller = TurnController(policy)
    for event in (ev.SessionStarted(at=0.0), ev.CallAnswered(at=1.0), ev.CallEnded(at=2.0)):
        controller.handle(event)
    assert controller.trace is not None
    return controller.trace


def test_the_diagram_is_drawn_under_the_calls_policy() -> None:
    outbound = TurnPolicy(direction="outbound", greeting="Hi")
    inbound = TurnPolicy(direction="inbound", greeting="Hi")
    same = build_report([_short_call(outbound), _short_call(outbound)])
    assert same.diagram().title.endswith("outbound call, user speaks first")
    mixed = build_report([_short_call(outbound), _short_call(inbound)])
    assert mixed.diagram().title.endswith("every declared transition")
    assert "every declared transition" in mixed.render()
