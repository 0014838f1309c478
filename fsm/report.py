"""A report across many calls: one self-contained HTML page a product owner can read.

:class:`CallReport` folds traces one at a time (:meth:`CallReport.add`) into counters
and fixed-bin distributions, so its memory does not grow with the number of calls; then
:meth:`CallReport.render` writes the page: how calls ended, time to greeting, greeting
overlaps, barge-ins, dropped text, tool caps, re-prompts, the time spent in each state,
and every call's path overlaid on the machine's diagram. Every figure comes from
:mod:`turnfsm.metrics`, the same per-call metrics the LiveKit telemetry emits; the page
has no script and loads nothing (inline CSS and SVG).

Distributions are exact counts in fixed bins: "90% within 2 s" means at least 90% of the
calls fell in the bins up to 2 s (past the last bin, the largest value seen is shown).

>>> from turnfsm import TurnController, TurnPolicy, events
>>> controller = TurnController(TurnPolicy(direction="inbound", greeting="Hi"))
>>> _ = controller.handle(events.SessionStarted(at=0.0))
>>> _ = controller.handle(events.CallEnded(at=4.0))
>>> report = CallReport()
>>> report.add(controller.trace)
>>> report.calls, report.figures()["ended_hangup"]
(1, '1 (100.0%)')
>>> report.render().startswith("<!DOCTYPE html>")
True
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from html import escape

import attrs

from .diagram import Diagram, build_diagram, edge_groups
from .machine import LOCKED_STATES
from .metrics import CallMetrics, call_metrics
from .policy import TurnPolicy
from .timeline import OTHER_STATE, STATE_COLOURS
from .trace import Trace

GREETING_BINS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
"""Upper edges (seconds) of the time-to-greeting bins; a last bin takes the rest."""

STATE_BINS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""Upper edges (seconds) of the per-call time-in-state bins."""

MAX_PROBLEMS = 20
"""Unreadable traces listed by name on the page (all are counted)."""


@attrs.define
class Distribution:
    """Values counted in fixed bins, with their count, sum, minimum and maximum.

    >>> d = Distribution((1.0, 2.0))
    >>> for value in (0.5, 1.5, 1.7, 9.0):
    ...     d.add(value)
    >>> d.bins, d.mean, d.bound(0.5), d.bound(0.9)
    ([1, 2, 1], 3.175, 2.0, 9.0)
    """

    edges: tuple[float, ...]
    bins: list[int] = attrs.field()
    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    @bins.default
    def _empty_bins(self) -> list[int]:
        return [0] * (len(self.edges) + 1)

    def add(self, value: float) -> None:
        self.bins[next((i for i, e in enumerate(self.edges) if value <= e), len(self.edges))] += 1
        self.count += 1
        self.total += value
        self.low, self.high = min(self.low, value), max(self.high, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def bound(self, fraction: float) -> float | None:
        """The smallest bin edge with at least ``fraction`` of the values at or below
        it; the largest value when that is past the last edge. ``None`` when empty."""
        if not self.count:
            return None
        seen = 0
        for edge, number in zip(self.edges, self.bins, strict=False):
            seen += number
            if seen >= fraction * self.count:
                return min(edge, self.high)
        return self.high


class CallReport:
    """Figures across calls, folded one trace at a time."""

    def __init__(self) -> None:
        self.calls = 0
        self.directions: Counter[str] = Counter()
        self.end_reasons: Counter[str] = Counter()
        self.to_greeting = Distribution(GREETING_BINS)
        self.durations = Distribution(STATE_BINS)
        self.state_times: dict[str, Distribution] = {}
        """State -> the time each call that visited it spent there."""
        self.totals: Counter[str] = Counter()
        """Sums of the per-call counts (``barge_ins``, ``drops``, ``tool_caps``...)."""
        self.calls_with: Counter[str] = Counter()
        """Calls where a count was at least one (``greeting_overlaps``, ``tool_caps``...)."""
        self.lever_outcomes: Counter[str] = Counter()
        """``"effect:outcome"`` -> levers refused by LiveKit or failed."""
        self.overlap_handling: Counter[str] = Counter()
        """``answer_whole`` / ``drop`` -> calls whose greeting was talked over."""
        self.paths: Counter[tuple[str, str, str]] = Counter()
        """``(before, event, after)`` -> times a call moved between two states that way."""
        self.visits: Counter[str] = Counter()
        """State -> calls that were in it."""
        self.policy: TurnPolicy | None = None
        """The calls' policy (the first call's, when they differ)."""
        self.mixed_policies = False
        self.problems: list[str] = []
        self.unreadable = 0

    # -- folding ---------------------------------------------------------------------------

    def add(self, trace: Trace) -> None:
        """Count one call."""
        self.add_metrics(call_metrics(trace))
        for step in trace.steps:
            if step.before != step.after:
                self.paths[(step.before, step.event.name, step.after)] += 1
        if self.policy is None:
            self.policy = trace.policy
        elif trace.policy != self.policy:
            self.mixed_policies = True

    def add_metrics(self, metrics: CallMetrics) -> None:
        """Count one call's metrics (its paths are not drawn)."""
        self.calls += 1
        self.directions[metrics.direction] += 1
        self.end_reasons[metrics.end_reason or "not ended"] += 1
        self.durations.add(metrics.duration)
        if metrics.time_to_greeting is not None:
            self.to_greeting.add(metrics.time_to_greeting)
        for state, seconds in metrics.state_seconds.items():
            self.state_times.setdefault(state, Distribution(STATE_BINS)).add(seconds)
        self.visits.update(metrics.states_visited)
        for name in COUNTS:
            value = getattr(metrics, name)
            self.totals[name] += value
            self.calls_with[name] += value > 0
        self.lever_outcomes.update(metrics.lever_outcomes)
        if metrics.overlap_handling is not None:
            self.overlap_handling[metrics.overlap_handling] += 1

    def skip(self, name: str, problem: str) -> None:
        """Count a trace that could not be read (listed on the page, up to a limit)."""
        self.unreadable += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{name}: {problem}")

    # -- figures ---------------------------------------------------------------------------

    @property
    def greeted(self) -> int:
        """Calls that reached the greeting."""
        return self.visits["greeting"]

    def figures(self) -> dict[str, str]:
        """Every headline figure as shown on the page, by id (tests read them here and
        in the page's ``data-figure`` attributes)."""
        t, w, g = self.totals, self.calls_with, self.to_greeting
        figures = {
            "calls": str(self.calls),
            "unreadable": str(self.unreadable),
            "greeting_heard": _share(g.count, self.calls),
            "greeting_median": _seconds(g.bound(0.5)),
            "greeting_p90": _seconds(g.bound(0.9)),
            "greeting_mean": _seconds(g.mean),
            "greeting_max": _seconds(g.high if g.count else None),
            "greeted": str(self.greeted),
            "overlap_rate": _percent(w["greeting_overlaps"], self.greeted),
            "overlaps": str(t["greeting_overlaps"]),
            "overlap_answered_whole": str(self.overlap_handling["answer_whole"]),
            "overlap_drop_policy": str(self.overlap_handling["drop"]),
            "overlap_dropped": str(t["overlap_dropped"]),
            "agent_speeches": str(t["agent_speeches"]),
            "barge_ins": str(t["barge_ins"]),
            "barge_in_rate": _percent(t["barge_ins"], t["agent_speeches"]),
            "calls_with_barge_in": _share(w["barge_ins"], self.calls),
            "discarded_speeches": str(t["discarded_speeches"]),
            "drops": str(t["drops"]),
            "dropped_chars": str(t["dropped_chars"]),
            "unmeasured_drops": str(t["unmeasured_drops"]),
            "calls_with_drop": _share(w["drops"], self.calls),
            "tool_rounds": str(t["tool_rounds"]),
            "tool_rounds_refused": str(t["tool_rounds_refused"]),
            "tool_caps": str(t["tool_caps"]),
            "calls_with_tool_cap": _share(w["tool_caps"], self.calls),
            "tool_cap_rate": _percent(w["tool_caps"], self.calls),
            "tool_fallbacks": str(t["tool_fallbacks"]),
            "reprompts": str(t["reprompts"]),
            "calls_with_reprompt": _share(w["reprompts"], self.calls),
            "greeting_retries": str(t["greeting_retries"]),
            "lever_problems": str(sum(self.lever_outcomes.values())),
            "duration_mean": _seconds(self.durations.mean),
        }
        for reason, count in self.end_reasons.items():
            figures[f"ended_{reason}"] = _share(count, self.calls)
        for state, d in self.state_times.items():
            figures[f"state_{state}_calls"] = str(d.count)
            figures[f"state_{state}_mean"] = _seconds(d.mean)
            figures[f"state_{state}_p90"] = _seconds(d.bound(0.9))
            figures[f"state_{state}_share"] = _percent(d.total, self._all_state_time())
        return figures

    def _all_state_time(self) -> float:
        return sum(times.total for times in self.state_times.values())

    def diagram(self) -> Diagram:
        """The machine drawn under the calls' policy when they share one, else whole."""
        return build_diagram(policy=None if self.mixed_policies else self.policy)

    # -- the page --------------------------------------------------------------------------

    def render(self, title: str = "turnfsm report") -> str:
        """The whole page as HTML text."""
        f = self.figures()
        directions = ", ".join(f"{n} {d}" for d, n in sorted(self.directions.items()))
        body = [
            f"<h1>{escape(title)}</h1>",
            f'<p class="lead"><b data-figure="calls">{f["calls"]}</b> calls'
            + (f" ({escape(directions)})" if directions else "")
            + (
                f', <b data-figure="unreadable">{f["unreadable"]}</b> unreadable traces skipped'
                if self.unreadable
                else ""
            )
            + ".</p>",
            self._tiles(f),
            self._endings(f),
            self._greeting(f),
            self._turns(f),
            self._states(f),
            self._paths(),
            self._problems(),
            _GLOSSARY,
        ]
        return _PAGE.format(title=escape(title), style=_STYLE, body="\n".join(body))

    def _tiles(self, f: Mapping[str, str]) -> str:
        tiles = [
            ("greeting_median", "half the callees heard the greeting within"),
            ("overlap_rate", "of greetings overlapped by the callee"),
            ("barge_in_rate", "of agent speeches cut by a barge-in"),
            ("dropped_chars", "unspoken characters dropped from the history"),
            ("tool_cap_rate", "of calls hit the tool-round cap"),
            ("reprompts", "idle re-prompts said"),
        ]
        cells = "".join(
            f'<div class="tile"><div class="big" data-figure="{key}">{escape(f[key])}</div>'
            f"<div>{escape(label)}</div></div>"
            for key, label in tiles
        )
        return f'<section class="tiles">{cells}</section>'

    def _endings(self, f: Mapping[str, str]) -> str:
        rows = []
        for reason, count in self.end_reasons.most_common():
            bar = _bar(count / self.calls if self.calls else 0.0, "#1d4ed8")
            rows.append(
                f"<tr><td>{escape(reason)}</td><td class='num' "
                f"data-figure='ended_{escape(reason)}'>{f[f'ended_{reason}']}</td>"
                f"<td>{bar}</td></tr>"
            )
        return _section(
            "How calls ended",
            _table(("Reason", "Calls", ""), rows)
            + f"<p>Mean call length: <b data-figure='duration_mean'>{f['duration_mean']}</b>"
            " from the first event to the last.</p>",
        )

    def _greeting(self, f: Mapping[str, str]) -> str:
        g = self.to_greeting
        labels = [f"≤ {_number(edge)} s" for edge in g.edges] + [f"> {_number(g.edges[-1])} s"]
        histogram = _histogram(labels, g.bins)
        text = (
            f"<p>The greeting was heard in <b data-figure='greeting_heard'>"
            f"{f['greeting_heard']}</b> calls, counted from the answer to its first audio. "
            f"Half within <b data-figure='greeting_median'>{f['greeting_median']}</b>, 90% "
            f"within <b data-figure='greeting_p90'>{f['greeting_p90']}</b>; mean "
            f"<b data-figure='greeting_mean'>{f['greeting_mean']}</b>, slowest "
            f"<b data-figure='greeting_max'>{f['greeting_max']}</b>.</p>"
            f"<p>The callee talked over the greeting in <b data-figure='overlap_rate'>"
            f"{f['overlap_rate']}</b> of the <b data-figure='greeted'>{f['greeted']}</b> "
            f"calls that reached it (<b data-figure='overlaps'>{f['overlaps']}</b> overlaps; "
            "a muted greeting hears none). Of those calls, <b data-figure="
            f"'overlap_answered_whole'>{f['overlap_answered_whole']}</b> answered the "
            "overlapping speech as one whole turn after the greeting and <b data-figure="
            f"'overlap_drop_policy'>{f['overlap_drop_policy']}</b> dropped it; pieces of "
            f"speech dropped: <b data-figure='overlap_dropped'>{f['overlap_dropped']}</b>.</p>"
        )
        return _section("Greeting", text + histogram)

    def _turns(self, f: Mapping[str, str]) -> str:
        rows = [
            ("Agent speeches played", "agent_speeches", ""),
            ("Barge-ins (speeches cut by the caller)", "barge_ins", "barge_in_rate"),
            ("Calls with a barge-in", "calls_with_barge_in", ""),
            ("Speeches discarded before any audio (not barge-ins)", "discarded_speeches", ""),
            ("Interrupted replies with unspoken text dropped", "drops", ""),
            ("Unspoken characters dropped", "dropped_chars", ""),
            ("Drops not measurable from the trace", "unmeasured_drops", ""),
            ("Calls with dropped text", "calls_with_drop", ""),
            ("Tool rounds run", "tool_rounds", ""),
            ("Tool rounds refused past the cap", "tool_rounds_refused", ""),
            ("Tool-round cap hits", "tool_caps", ""),
            ("Calls that hit the cap", "calls_with_tool_cap", ""),
            ("Fallbacks said after the cap", "tool_fallbacks", ""),
            ("Idle re-prompts", "reprompts", ""),
            ("Calls with a re-prompt", "calls_with_reprompt", ""),
            ("Greetings said again after a failed start", "greeting_retries", ""),
            ("Levers refused by LiveKit or failed", "lever_problems", ""),
        ]
        cells = [
            f"<tr><td>{escape(label)}</td><td class='num' data-figure='{key}'>{f[key]}</td>"
            + (f"<td class='num' data-figure='{rate}'>{f[rate]}</td>" if rate else "<td></td>")
            + "</tr>"
            for label, key, rate in rows
        ]
        outcomes = ""
        if self.lever_outcomes:
            lines = [
                f"<tr><td>{escape(name)}</td><td class='num'>{count}</td></tr>"
                for name, count in sorted(self.lever_outcomes.items())
            ]
            outcomes = "<h3>Levers that did not do their effect</h3>" + _table(
                ("Effect: outcome", "Times"), lines
            )
        return _section(
            "Turns, barge-ins, dropped text and tools",
            _table(("", "Count", "Rate"), cells) + outcomes,
        )

    def _states(self, f: Mapping[str, str]) -> str:
        order = [s for s in _STATE_ORDER if s in self.state_times] + sorted(
            set(self.state_times) - set(_STATE_ORDER)
        )
        total = self._all_state_time()
        stacked = _stacked(
            [(s, self.state_times[s].total / total if total else 0.0) for s in order]
        )
        rows = [
            f"<tr><td>{_swatch(state)} {escape(state)}</td>"
            f"<td class='num' data-figure='state_{state}_calls'>{f[f'state_{state}_calls']}</td>"
            f"<td class='num' data-figure='state_{state}_share'>{f[f'state_{state}_share']}</td>"
            f"<td class='num' data-figure='state_{state}_mean'>{f[f'state_{state}_mean']}</td>"
            f"<td class='num' data-figure='state_{state}_p90'>{f[f'state_{state}_p90']}</td>"
            f"<td>{_histogram_inline(self.state_times[state])}</td></tr>"
            for state in order
        ]
        return _section(
            "Time in each state",
            stacked
            + _table(
                ("State", "Calls in it", "Share of all time", "Mean per call", "90% within", ""),
                rows,
            ),
        )

    def _paths(self) -> str:
        diagram = self.diagram()
        svg = overlay_svg(diagram, self.paths, self.visits, self.calls)
        rows = [
            f"<tr><td>{escape(before)} → {escape(after)}</td><td>{escape(event)}</td>"
            f"<td class='num'>{count}</td></tr>"
            for (before, event, after), count in sorted(
                self.paths.items(), key=lambda item: (-item[1], item[0])
            )
        ]
        return _section(
            "Paths through the machine",
            f"<p>{escape(diagram.title)}: every call's moves between states, summed. "
            "Line width grows with the count; grey dashed moves were never taken.</p>"
            + svg
            + _table(("Move", "Event", "Times"), rows),
        )

    def _problems(self) -> str:
        if not self.problems:
            return ""
        items = "".join(f"<li>{escape(problem)}</li>" for problem in self.problems)
        more = self.unreadable - len(self.problems)
        tail = f"<p>… and {more} more.</p>" if more > 0 else ""
        return _section("Unreadable traces", f"<ul>{items}</ul>{tail}")


COUNTS: tuple[str, ...] = (
    "greeting_overlaps",
    "overlap_dropped",
    "agent_speeches",
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
)
"""The per-call counts of :class:`~turnfsm.metrics.CallMetrics` summed across calls."""


def build_report(traces: Iterable[Trace]) -> CallReport:
    """Fold ``traces`` (any iterable: a generator keeps one trace in memory at a time)."""
    report = CallReport()
    for trace in traces:
        report.add(trace)
    return report


# -- the overlay ------------------------------------------------------------------------------

_STATE_ORDER = ("ringing", "awaiting_user", "greeting", "listening", "speaking", "tool_loop")
_BOX_W, _BOX_H, _GAP, _MID = 190, 40, 78, 330


def overlay_svg(
    diagram: Diagram,
    paths: Mapping[tuple[str, str, str], int],
    visits: Mapping[str, int],
    calls: int,
) -> str:
    """The diagram's states in a column, every move between two states as an arc (down on
    the right, up on the left), its width and label from how often calls took it."""
    # calls are in leaf states only: a compound state's box would stay empty
    compound = set(getattr(diagram, "parents", {}).values())
    states = [state for state in diagram.states if state not in compound]
    y = {state: 30 + i * _GAP for i, state in enumerate(states)}
    pairs: Counter[tuple[str, str]] = Counter()
    for (before, _, after), count in paths.items():
        pairs[(before, after)] += count
    drawn = [(s, t) for s, t, _ in edge_groups(diagram) if s in y and t in y]
    extra = sorted(p for p in pairs if p not in drawn and p[0] in y and p[1] in y)
    busiest = max(pairs.values(), default=1)
    arcs = []
    for source, target in drawn + extra:
        count = pairs.get((source, target), 0)
        arcs.append(_arc(y[source], y[target], count, busiest, f"{source} → {target}"))
    boxes = [_box(state, y[state], diagram, visits.get(state, 0), calls) for state in states]
    height = 30 + len(states) * _GAP
    return (
        f'<svg class="overlay" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {2 * _MID} '
        f'{height}" width="{2 * _MID}" height="{height}" role="img" '
        f'aria-label="{escape(diagram.title)}">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#334155"/></marker></defs>'
        + "".join(arcs)
        + "".join(boxes)
        + "</svg>"
    )


def _arc(y1: float, y2: float, count: int, busiest: int, tip: str) -> str:
    down = y2 > y1
    side = 1 if down else -1
    span = abs(y2 - y1) / _GAP
    x = _MID + side * _BOX_W / 2
    reach = x + side * (24 + 22 * span)
    # longer jumps leave and arrive further from the boxes' middle, so arcs fan out
    offset = side * min(17.0, 4 + 4 * (span - 1))
    start, end = y1 + offset, y2 - offset
    width = 1 + 7 * count / busiest if count else 1
    colour = "#1d4ed8" if count else "#94a3b8"
    dash = "" if count else ' stroke-dasharray="4 3"'
    path = f"M{x:.0f},{start:.0f} C{reach:.0f},{start:.0f} {reach:.0f},{end:.0f} {x:.0f},{end:.0f}"
    label_x = x + side * 6 + 0.75 * (reach - x)
    anchor = "start" if down else "end"
    label = (
        f'<text x="{label_x:.0f}" y="{(start + end) / 2 + 4:.0f}" text-anchor="{anchor}" '
        f'class="count">×{count}</text>'
        if count
        else ""
    )
    return (
        f'<g><title>{escape(tip)}: {count}</title><path d="{path}" fill="none" '
        f'stroke="{colour}" stroke-width="{width:.1f}"{dash} marker-end="url(#arrow)"/>'
        f"{label}</g>"
    )


def _box(state: str, y: float, diagram: Diagram, visits: int, calls: int) -> str:
    fill = STATE_COLOURS.get(state, OTHER_STATE) if visits else "#f8fafc"
    stroke = "#c62828" if state in LOCKED_STATES else "#334155"
    share = f"{visits} calls ({_percent(visits, calls)})" if calls else "no calls"
    lock = " (locked)" if state in diagram.locked else ""
    final = ' stroke-dasharray="2 2"' if state in diagram.finals else ""
    x = _MID - _BOX_W / 2
    ink = ' style="fill:#ffffff"' if _dark(fill) else ""
    return (
        f"<g><title>{escape(state)}: {escape(share)}</title>"
        f'<rect x="{x:.0f}" y="{y - _BOX_H / 2:.0f}" width="{_BOX_W}" height="{_BOX_H}" rx="8" '
        f'fill="{fill}" stroke="{stroke}" stroke-width="2"{final}/>'
        f'<text x="{_MID}" y="{y - 3:.0f}" text-anchor="middle" class="state"{ink}>'
        f"{escape(state + lock)}</text>"
        f'<text x="{_MID}" y="{y + 13:.0f}" text-anchor="middle" class="visits"{ink}>'
        f"{escape(share)}</text></g>"
    )


def _dark(colour: str) -> bool:
    """Whether a ``#rrggbb`` fill needs white text."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.299 * red + 0.587 * green + 0.114 * blue < 128


# -- small pieces of the page -------------------------------------------------------------------


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "–"


def _share(part: int, whole: int) -> str:
    return f"{part} ({_percent(part, whole)})"


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def _number(value: float) -> str:
    return f"{value:g}"


def _section(title: str, content: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{content}</section>"


def _table(headers: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _bar(fraction: float, colour: str) -> str:
    width = max(0.0, min(1.0, fraction)) * 240
    return (
        f'<svg width="240" height="12" aria-hidden="true"><rect width="240" height="12" '
        f'fill="#e2e8f0"/><rect width="{width:.1f}" height="12" fill="{colour}"/></svg>'
    )


def _histogram(labels: Sequence[str], bins: Sequence[int]) -> str:
    peak = max(bins, default=0) or 1
    rows = [
        f"<tr><td>{escape(label)}</td><td class='num'>{count}</td>"
        f"<td>{_bar(count / peak, '#7c3aed')}</td></tr>"
        for label, count in zip(labels, bins, strict=True)
    ]
    return _table(("Time to greeting", "Calls", ""), rows)


def _histogram_inline(distribution: Distribution) -> str:
    """A small column chart of a state's per-call times over :data:`STATE_BINS`."""
    peak = max(distribution.bins) or 1
    width = 8
    columns = "".join(
        f'<rect x="{i * (width + 2)}" y="{24 - 22 * n / peak:.1f}" width="{width}" '
        f'height="{22 * n / peak:.1f}" fill="#475569"><title>'
        f"{escape(_bin_label(distribution.edges, i))}: {n}</title></rect>"
        for i, n in enumerate(distribution.bins)
    )
    total = len(distribution.bins) * (width + 2)
    return f'<svg width="{total}" height="24" role="img" aria-label="histogram">{columns}</svg>'


def _bin_label(edges: Sequence[float], index: int) -> str:
    return f"≤ {_number(edges[index])} s" if index < len(edges) else f"> {_number(edges[-1])} s"


def _stacked(parts: Sequence[tuple[str, float]]) -> str:
    x = 0.0
    rects = []
    for state, share in parts:
        width = share * 640
        rects.append(
            f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="22" '
            f'fill="{STATE_COLOURS.get(state, OTHER_STATE)}"><title>{escape(state)}: '
            f"{100 * share:.1f}%</title></rect>"
        )
        x += width
    return (
        '<svg width="640" height="22" role="img" aria-label="share of time per state">'
        + "".join(rects)
        + "</svg>"
    )


def _swatch(state: str) -> str:
    colour = STATE_COLOURS.get(state, OTHER_STATE)
    return (
        f'<svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" '
        f'fill="{colour}"/></svg>'
    )


_GLOSSARY = """<section class="glossary"><h2>How the figures are counted</h2><ul>
<li><b>Time to greeting</b>: from the answer (or the session's start, inbound) to the first
audio of the locked greeting.</li>
<li><b>Overlap</b>: the callee started speaking while the greeting played.</li>
<li><b>Barge-in</b>: an agent speech the callee interrupted, while the call was live, after
some of its audio played.</li>
<li><b>Discarded speech</b>: an agent speech stopped before any of its audio played, such as
a reply LiveKit prepared early and threw away (preemptive generation); not a barge-in.</li>
<li><b>Dropped text</b>: the part of an interrupted reply the caller never heard, removed
from the history; a drop is unmeasured when only the played time is known. A speech
LiveKit committed no text for left nothing to drop (nor is that lever's refusal counted).</li>
<li><b>Tool-round cap</b>: the policy's <code>max_tool_steps</code> reached; one final reply
without tools was asked for.</li>
<li><b>90% within</b>: counted in fixed bins; past the last bin the largest value is shown.</li>
</ul></section>"""

_STYLE = """
body { font: 15px/1.45 Helvetica, Arial, sans-serif; color: #0f172a; margin: 24px auto;
  max-width: 980px; padding: 0 16px; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #cbd5e1; padding-bottom: 4px; }
.lead { color: #334155; }
.tiles { display: grid; grid-template-columns: repeat(3, 1fr); gap: 12px; }
.tile { background: #f1f5f9; border-radius: 8px; padding: 12px; }
.big { font-size: 28px; font-weight: bold; color: #1d4ed8; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e2e8f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg.overlay { display: block; margin: 8px auto; }
svg .state { font: bold 14px Helvetica, Arial, sans-serif; }
svg .visits { font: 11px Helvetica, Arial, sans-serif; fill: #334155; }
svg .count { font: 11px Helvetica, Arial, sans-serif; fill: #1d4ed8; paint-order: stroke;
  stroke: #ffffff; stroke-width: 3px; }
.glossary { color: #475569; font-size: 13px; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{style}</style></head>
<body>
{body}
</body></html>
"""
