"""Issue 22: a report a team lead can drill into, checked in headless Chromium at 1,000
calls.

The page of ``turnfsm report -o`` over 1,000 simulated calls (six policies, three
agents, three days): every call is a row of the calls table, linked to its timeline
(written beside the page, and drawn by the browser); the calls are grouped by policy,
agent and day, each group with its own figures, and its link shows only its calls; the
percentiles are exact (nearest rank, computed apart in ``reference.py``). Two
screenshots are kept (the page's top; one day's calls) and named in the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from browser import Screenshot, open_page
from reference import nearest_rank, seconds
from simcalls import simulated_traces

from turnfsm import Trace
from turnfsm.tools.cli import main
from turnfsm.tools.metrics import call_metrics
from turnfsm.tools.report import policy_id

CALLS = 1000


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return list(simulated_traces(CALLS, seed=5000))


@pytest.fixture(scope="module")
def page(traces: list[Trace], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("traces")
    for trace in traces:
        trace.write(folder / f"{trace.call.call_id}.jsonl")
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    return out


COUNT_ROWS = """(async () => {
    const visible = () => [...document.querySelectorAll('table.calls tbody tr')]
        .filter(row => row.getBoundingClientRect().height > 0);
    const groups = [...document.querySelectorAll('table.groups')].map(table =>
        [...table.querySelectorAll('tbody tr')].map(row => [
            row.cells[0].innerText, row.querySelector('a').getAttribute('href'),
            Number(row.querySelector('a').innerText)]));
    const all = visible().length;
    const links = [...document.querySelectorAll('table.calls tbody tr td:nth-child(2) a')]
        .map(a => a.getAttribute('href'));
    const filtered = {};
    for (const table of groups) {
        for (const [name, href, count] of table) {
            location.hash = href;
            await new Promise(resolve => requestAnimationFrame(() => resolve()));
            filtered[href] = [visible().length, count,
                document.querySelector('p.showing').innerText];
        }
    }
    location.hash = '#calls';
    await new Promise(resolve => requestAnimationFrame(() => resolve()));
    const p95 = document.querySelector('[data-figure=greeting_p95]');
    const box = p95.getBoundingClientRect();
    window.scrollTo(0, 0);
    return JSON.stringify({all, links, groups, filtered, afterReset: visible().length,
        p95: [p95.innerText, box.width > 0 && box.height > 0]});
})()"""


@pytest.mark.wall_clock  # drives a real Chromium process
async def test_the_calls_table_groups_and_links_at_1000_calls(
    traces: list[Trace], page: Path, summary_line: object
) -> None:
    top = page.with_name("report-top.png")
    shown = await open_page(
        page.resolve().as_uri(), COUNT_ROWS, timeout=120, screenshot=Screenshot(top)
    )
    assert shown.errors == [], shown.errors
    result = json.loads(shown.value)
    assert result["all"] == CALLS
    assert result["afterReset"] == CALLS
    # every call links to its own timeline, written beside the page
    assert len(result["links"]) == CALLS
    assert len(set(result["links"])) == CALLS
    for href in result["links"]:
        assert (page.parent / href).read_text(encoding="utf-8").startswith("<svg")
    # the groups: by policy, agent and day, each link showing exactly its calls
    expected = [
        Counter(policy_id(trace.policy) for trace in traces),
        Counter(trace.call.agent_name for trace in traces),
        Counter(trace.call.day for trace in traces),
    ]
    groups = result["groups"]
    assert [{name: count for name, _, count in table} for table in groups] == expected
    assert len(groups[0]) == 6
    for table in groups:
        for name, href, count in table:
            rows, said, showing = result["filtered"][href]
            assert rows == count == said, (name, href)
            assert name in showing
    # exact p95, by nearest rank
    greetings = [m.time_to_greeting for m in map(call_metrics, traces)]
    p95 = seconds(nearest_rank([g for g in greetings if g is not None], 95))
    assert result["p95"] == [p95, True]
    day = groups[2][1][1]
    day_shot = page.with_name("report-day.png")
    shown = await open_page(
        page.resolve().as_uri() + day,
        "document.querySelector('p.showing').innerText",
        screenshot=Screenshot(day_shot, height=1000),
    )
    assert shown.errors == [], shown.errors
    summary_line(  # type: ignore[operator]
        f"report at {CALLS} calls: {page.stat().st_size / 1e6:.1f} MB page, "
        f"screenshots {top} and {day_shot} ({shown.value})"
    )


@pytest.mark.wall_clock  # drives a real Chromium process
async def test_a_linked_timeline_renders(page: Path) -> None:
    timeline = sorted((page.parent / "report-timelines").iterdir())[0]
    shown = await open_page(
        timeline.resolve().as_uri(),
        "JSON.stringify([document.documentElement.tagName, "
        "document.documentElement.getBBox().height])",
    )
    assert shown.errors == [], shown.errors
    tag, height = json.loads(shown.value)
    assert tag == "svg"
    assert height > 200
