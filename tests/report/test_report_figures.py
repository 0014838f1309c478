"""Issue 13, point 5: ``turnfsm report`` over 200 simulated calls shows the numbers the
traces hold, computed here independently (``reference.py``); the page renders in a real
headless Chromium with no console error and every figure visible.

The 200 calls are scripted event sequences through the pure, strict controller
(``simcalls.py``): every direction, greeting lock and overlap policy, barge-ins with and
without the heard text, tool caps, re-prompts, answering machines and silent callees.
"""

from __future__ import annotations

import json
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import open_page
from reference import call_figures, report_figures, row_figures
from simcalls import simulated_traces

from turnfsm import Trace, TurnController
from turnfsm.machine import VOICE_STATES
from turnfsm.tools.cli import main
from turnfsm.tools.metrics import call_metrics
from turnfsm.tools.report import CallReport

CALLS = 200


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return list(simulated_traces(CALLS))


@pytest.fixture(scope="module")
def trace_dir(traces: list[Trace], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("traces")
    for number, trace in enumerate(traces):
        trace.write(folder / f"call-{number:04d}.jsonl")
    return folder


@pytest.fixture(scope="module")
def page(trace_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", *sorted(map(str, trace_dir.glob("*.jsonl"))), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def expected(traces: list[Trace]) -> dict[str, str]:
    return report_figures([{**call_figures(t), **row_figures(t)} for t in traces])


class Figures(HTMLParser):
    """Every ``data-figure`` element's text, by figure id (each id's texts, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[str]] = {}
        self._open: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        figure = dict(attributes).get("data-figure")
        if figure:
            self._open.append((tag, figure))
            self.found.setdefault(figure, []).append("")

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open:
            self.found[self._open[-1][1]][-1] += data


def test_the_calls_cover_every_figure(traces: list[Trace]) -> None:
    """The scripted calls are varied enough for the comparison to mean something."""
    calls = [call_figures(t) for t in traces]
    for name in (
        "greeting_overlaps",
        "overlap_dropped",
        "barge_ins",
        "discarded_speeches",
        "drops",
        "dropped_chars",
        "unmeasured_drops",
        "tool_rounds",
        "tool_rounds_refused",
        "tool_caps",
        "tool_fallbacks",
        "reprompts",
        "greeting_retries",
    ):
        assert sum(c[name] for c in calls) > 0, name
    assert any(c["lever_outcomes"] for c in calls)
    assert {c["overlap_handling"] for c in calls} == {None, "drop", "answer_whole"}
    reasons = {c["end_reason"] for c in calls}
    assert {"hangup", "idle", "no_answer", "answering_machine", "max_duration"} <= reasons
    assert {c["direction"] for c in calls} == {"inbound", "outbound"}


def test_each_call_metric_equals_the_trace(traces: list[Trace]) -> None:
    for number, trace in enumerate(traces):
        metrics = call_metrics(trace)
        for name, value in call_figures(trace).items():
            got = getattr(metrics, name)
            got = list(got) if isinstance(got, tuple) else got
            got = dict(got) if name == "state_seconds" else got
            assert got == value, f"call {number}: {name} is {got!r}, the trace says {value!r}"


def test_the_report_numbers_equal_the_traces(
    traces: list[Trace], expected: dict[str, str]
) -> None:
    report = CallReport()
    for trace in traces:
        report.add(trace)
    figures = report.figures()
    assert figures.pop("unreadable") == "0"
    assert figures.pop("torn") == "0"
    assert figures == expected


def test_the_page_shows_those_numbers(page: Path, expected: dict[str, str]) -> None:
    parser = Figures()
    parser.feed(page.read_text(encoding="utf-8"))
    for figure, value in expected.items():
        assert figure in parser.found, f"{figure} is not on the page"
        assert set(parser.found[figure]) == {value}, (figure, parser.found[figure], value)


def test_the_overlay_counts_every_move(traces: list[Trace], page: Path) -> None:
    moves = Counter(
        (s.before, s.event.name, s.after) for t in traces for s in t.steps if s.before != s.after
    )
    report = CallReport()
    for trace in traces:
        report.add(trace)
    assert Counter({m: n for m, n in report.paths.items() if m[0] not in VOICE_STATES}) == moves
    pairs = Counter()
    for (before, _, after), count in moves.items():
        pairs[(before, after)] += count
    html = page.read_text(encoding="utf-8")
    for (before, after), count in pairs.items():
        assert f"<title>{before} → {after}: {count}</title>" in html
        assert f">×{count}</text>" in html
    for (before, event, after), count in moves.items():
        row = f"<td>{before} → {after}</td><td>{event}</td><td class='num'>{count}</td>"
        assert row in html


def test_the_callers_voice_is_counted_as_the_chart_moves_it(
    traces: list[Trace], page: Path
) -> None:
    """Issue 22: the diagram said caller_silent and caller_speaking were visited by no
    call, though every callee spoke (a trace records the turn's state only). The report's
    voice moves and visits now equal what the chart did: each call replayed here through
    a controller, its configuration read after every step."""
    moves: Counter[tuple[str, str, str]] = Counter()
    visits: Counter[str] = Counter()
    for trace in traces:
        controller = TurnController(trace.policy, record=False)
        seen = set()
        voice = None
        for step in trace:
            controller.handle(step.event)
            after = next((s for s in controller.configuration if s in VOICE_STATES), None)
            if voice is not None and after is not None and after != voice:
                moves[(voice, step.event.name, after)] += 1
            voice = after
            seen |= {after} - {None}
        visits.update(seen)
    report = CallReport()
    for trace in traces:
        report.add(trace)
    assert Counter({m: n for m, n in report.paths.items() if m[0] in VOICE_STATES}) == moves
    assert {state: report.visits[state] for state in VOICE_STATES} == dict(visits)
    assert visits["caller_speaking"] > 100  # the calls were heard
    html = page.read_text(encoding="utf-8")
    for state in VOICE_STATES:
        assert f"<title>{state}: {visits[state]} calls (" in html


def test_the_page_is_self_contained(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    for needle in ("<script", "http://", "https://", "<link", "@import", "url(http"):
        assert needle not in html.replace('xmlns="http://www.w3.org/2000/svg"', ""), needle


@pytest.mark.wall_clock  # drives a real Chromium process
async def test_the_page_renders_in_chromium(page: Path, expected: dict[str, str]) -> None:
    script = """JSON.stringify({
        text: document.body.innerText,
        figures: [...document.querySelectorAll('[data-figure]')].map(e => {
            const box = e.getBoundingClientRect();
            return [e.dataset.figure, e.innerText, box.width > 0 && box.height > 0];
        }),
        svgs: [...document.querySelectorAll('svg')].filter(s => {
            const box = s.getBoundingClientRect(); return box.width > 0 && box.height > 0;
        }).length,
        overlay: document.querySelector('svg.overlay').getBBox().height,
    })"""
    shown = await open_page(page.resolve().as_uri(), script)
    assert shown.errors == [], shown.errors
    result = json.loads(shown.value)
    visible = {}
    for figure, text, has_box in result["figures"]:
        assert has_box, f"{figure} is not visible"
        visible.setdefault(figure, set()).add(text)
    for figure, value in expected.items():
        assert visible.get(figure) == {value}, (figure, visible.get(figure), value)
    for headline in ("How calls ended", "Greeting", "Time in each state", "Paths through"):
        assert headline in result["text"]
    assert result["svgs"] > 10
    assert result["overlay"] > 400  # the diagram was laid out, not an empty box


@pytest.mark.wall_clock  # drives a real Chromium process
async def test_a_page_with_an_error_is_caught(tmp_path: Path) -> None:
    """The browser check can fail: a console error and a missing image are reported."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><img src='missing.png'>"
        "<script>console.error('boom')</script></body></html>",
        encoding="utf-8",
    )
    shown = await open_page(bad.as_uri(), "document.title")
    assert any("boom" in error for error in shown.errors), shown.errors
    assert any("missing.png" in error for error in shown.errors), shown.errors
