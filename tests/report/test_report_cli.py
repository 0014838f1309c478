"""``turnfsm report`` on the command line: folders and files, bad input named, never a
traceback."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from simcalls import simulated_trace, simulated_traces

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.tools import report as report_module
from turnfsm.tools.cli import main
from turnfsm.tools.report import build_report, policy_id
from turnfsm.trace import redact


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


# -- issue 22: one bad file never fails the report ------------------------------------------


def _lines_starting_turnfsm(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("turnfsm:")]


def test_a_redacted_length_of_5000_digits_is_one_call_not_an_internal_error(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[redacted <5,000 digits> chars]`` made the metrics' ``int()`` raise, and
    ``turnfsm report`` failed for every trace ("internal error")."""
    controller = TurnController(TurnPolicy(greeting="Hi"), keep_text=True)
    for event in (
        ev.SessionStarted(at=0.0),
        ev.AgentSpeechCreated(at=0.1, speech_id="g"),
        ev.AssistantMessageCommitted(
            at=2.0, speech_id="g", text=f"[redacted {'9' * 5000} chars]", interrupted=True
        ),
        ev.AgentSpeechEnded(at=2.0, speech_id="g", interrupted=True),
        ev.CallEnded(at=3.0),
    ):
        controller.handle(event)
    assert controller.trace is not None
    controller.trace.write(folder / "digits.jsonl")
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert '<b data-figure="calls">4</b> calls' in out.read_text(encoding="utf-8")


def test_an_unreadable_trace_with_a_name_that_is_not_utf8_is_listed_printably(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its name reached the page undecodable: writing the page failed for every trace."""
    bad = os.path.join(os.fsencode(folder), b"caf\xe9-\xff.jsonl")
    with open(bad, "wb") as stream:
        stream.write(b"not a trace\n")
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "caf\\xe9-\\xff.jsonl" in err
    page = out.read_text(encoding="utf-8")
    assert '<b data-figure="unreadable">1</b> unreadable traces skipped' in page
    assert "caf\\xe9-\\xff.jsonl: line 1" in page


def test_a_file_name_cannot_reach_the_terminal_raw_nor_forge_a_line(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "x\x1b[2J\x1b]0;pwned\x07\nturnfsm: ok: all traces read\r.jsonl"
    (folder / name).write_text("not a trace\n", encoding="utf-8")
    assert main(["report", str(folder), "-o", str(tmp_path / "report.html")]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\x07" not in err
    assert "\r" not in err
    (line,) = _lines_starting_turnfsm(err)  # one warning line, no forged second one
    assert line.startswith("turnfsm: warning: skipped ")
    assert "\\x1b[2J" in line
    assert "\\nturnfsm: ok" in line


def test_a_torn_last_line_is_skipped_with_a_warning_and_the_call_counted(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = folder / "call-1.jsonl"
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) - 20])  # the writer died mid-step
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    (line,) = _lines_starting_turnfsm(capsys.readouterr().err)
    assert "call-1.jsonl: line" in line
    assert "cut short" in line
    page = out.read_text(encoding="utf-8")
    assert '<b data-figure="calls">3</b> calls' in page
    assert '<b data-figure="torn">1</b> with a torn last line skipped' in page
    assert "call-1.jsonl (torn)" in page


def test_an_unforeseen_error_leaves_that_trace_out_and_reports_the_others(
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever goes wrong folding one trace (a bug of turnfsm's, here simulated by a
    metrics function that fails on one call) leaves that trace out, named, and the page
    holds the others: one bad file never fails the report."""
    real = report_module.call_metrics

    def failing_on_one_call(trace: Trace) -> object:
        if trace.call.call_id == "call-00001":
            raise ValueError("boom")
        return real(trace)

    monkeypatch.setattr(report_module, "call_metrics", failing_on_one_call)
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    (line,) = _lines_starting_turnfsm(capsys.readouterr().err)
    assert "call-1.jsonl: internal error: ValueError: boom (please report it)" in line
    assert '<b data-figure="calls">2</b> calls' in out.read_text(encoding="utf-8")


# -- issue 22: drilling in: calls, groups, filters --------------------------------------------


def test_each_call_is_listed_and_linked_to_its_timeline(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    timelines = sorted((tmp_path / "report-timelines").iterdir())
    assert [path.name for path in timelines] == [f"call-{n:06d}.svg" for n in (1, 2, 3)]
    for number in range(3):
        call_id = simulated_trace(number).call.call_id
        assert call_id is not None
        assert re.search(rf'<a href="report-timelines/call-00000\d\.svg">{call_id}</a>', page)
    assert main(["report", str(folder), "-o", str(tmp_path / "bare.html"), "--no-timelines"]) == 0
    assert not (tmp_path / "bare-timelines").exists()
    assert "Timelines are linked when" in (tmp_path / "bare.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("option", ["--agent", "--day", "--policy"])
def test_a_filter_reports_only_its_calls(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = list(simulated_traces(30))
    folder = tmp_path / "traces"
    folder.mkdir()
    for trace in traces:
        trace.write(folder / f"{trace.call.call_id}.jsonl")
    key = {
        "--agent": lambda t: t.call.agent_name,
        "--day": lambda t: t.call.day,
        "--policy": lambda t: policy_id(t.policy),
    }[option]
    value = key(traces[0])
    wanted = [t for t in traces if key(t) == value]
    assert 0 < len(wanted) < len(traces)
    out = tmp_path / "report.html"
    assert main(["report", str(folder), option, value, "-o", str(out), "--no-timelines"]) == 0
    page = out.read_text(encoding="utf-8")
    assert f'<b data-figure="calls">{len(wanted)}</b> calls' in page
    assert f"Only calls of {option.removeprefix('--')} {value}." in page
    nobody = "1999-01-01" if option == "--day" else "nobody"
    assert main(["report", str(folder), option, nobody, "-o", str(out)]) == 1
    assert "no call of" in capsys.readouterr().err


def test_calls_under_different_policies_are_not_summed_silently() -> None:
    outbound = TurnPolicy(direction="outbound", greeting="Hi")
    inbound = TurnPolicy(direction="inbound", greeting="Hi")
    mixed = build_report([_short_call(outbound), _short_call(inbound), _short_call(inbound)])
    page = mixed.render()
    assert "These calls ran under 2 different policies" in page
    rows = re.findall(
        r'<tr data-group="p\d"><td>([0-9a-f]{8})</td><td class="settings">(.*?)</td>', page
    )
    assert dict(rows) == {  # each policy's own row, with the settings that tell them apart
        policy_id(redact(outbound)): "direction <b>outbound</b>; first_speaker <b>user</b>",
        policy_id(redact(inbound)): "direction <b>inbound</b>; first_speaker <b>agent</b>",
    }
    same = build_report([_short_call(inbound), _short_call(inbound)]).render()
    assert "different policies" not in same
