"""A report across many calls: one self-contained HTML page a team lead can read and
drill into.

:class:`CallReport` folds traces one at a time (:meth:`CallReport.add`): each call's
figures (:mod:`turnfsm.tools.metrics`, the same per-call metrics the LiveKit telemetry emits)
are summed, and each call keeps one small row (:class:`CallRow`: its id, start, agent,
policy, duration, end reason, breaches...), so memory grows by a row per call, never by a
trace. :meth:`CallReport.render` then writes the page:

* the calls **by policy, by agent and by day**, each group with its own figures (calls
  under different policies are never summed silently: the page says how many policies
  the figures below mix), and a link that shows only that group's calls;
* **every call** in a table (call id, start, agent, policy, duration, end reason,
  outcome breaches, barge-ins, time to greeting), each call linked to its timeline when
  the page was written with them (``turnfsm report -o``);
* how calls ended, time to greeting, greeting overlaps, barge-ins, dropped text, tool
  caps, re-prompts, the time spent in each state, outcome breaches, and every call's
  path overlaid on the machine's diagram (the caller's voice included).

Percentiles are exact, by nearest rank: p95 is the smallest value that at least 95% of
the calls are at or below (a value some call really had). The page has no script and
loads nothing but the timelines it links to (inline CSS and SVG; the group links filter
the calls table with CSS ``:target``).

Every string taken from a trace (ids, names, reasons) is escaped with
:func:`turnfsm.tools.escape.xml_text`: control, bidirectional and invisible characters are
spelt as escapes.

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

import array
import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import attrs

from .. import effects as fx
from .. import events as ev
from ..machine import LIVE_STATES, LOCKED_STATES, VOICE_STATES
from ..policy import TurnPolicy
from ..trace import Trace, TraceStep
from .diagram import Diagram, build_diagram, collapse_phases, edge_groups
from .escape import xml_text
from .metrics import CallMetrics, call_metrics
from .timeline import OTHER_STATE, STATE_COLOURS

GREETING_BINS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
"""Upper edges (seconds) of the time-to-greeting histogram's bins; a last bin takes the rest."""

STATE_BINS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""Upper edges (seconds) of the per-call time-in-state histograms' bins."""

PERCENTILES: tuple[int, ...] = (50, 95, 99)
"""The percentiles shown for times: the median, p95 and p99."""

MAX_PROBLEMS = 20
"""Unreadable traces listed by name on the page (all are counted)."""

MAX_CALL_ROWS = 10_000
"""Calls listed in the page's table (the earliest ones; all are counted): filter the
report (``turnfsm report --agent/--day/--policy``) to list others."""

UNKNOWN = "unknown"
"""The agent or day of a call whose trace does not say (a format 1 trace)."""


def percentile(values: Sequence[float], percent: float) -> float | None:
    """The nearest-rank percentile of ``values`` (sorted): the smallest value with at
    least ``percent`` % of the values at or below it; ``None`` when there are none.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 95)
    (2.0, 4.0)
    """
    if not values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(values)))
    return values[rank - 1]


@attrs.define
class Distribution:
    """Values counted in fixed bins (for the histograms), each also kept (8 bytes) for
    exact percentiles.

    >>> d = Distribution((1.0, 2.0))
    >>> for value in (0.5, 1.5, 1.7, 9.0):
    ...     d.add(value)
    >>> d.bins, d.mean, d.percentile(50), d.percentile(95)
    ([1, 2, 1], 3.175, 1.5, 9.0)
    """

    edges: tuple[float, ...]
    bins: list[int] = attrs.field()
    values: array.array[float] = attrs.field(factory=lambda: array.array("d"))
    _sorted: list[float] | None = None

    @bins.default
    def _empty_bins(self) -> list[int]:
        return [0] * (len(self.edges) + 1)

    def add(self, value: float) -> None:
        self.bins[next((i for i, e in enumerate(self.edges) if value <= e), len(self.edges))] += 1
        self.values.append(value)
        self._sorted = None

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def total(self) -> float:
        return sum(self.values)  # not fsum: it raises when times near the largest float add up

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    @property
    def high(self) -> float | None:
        return max(self.values) if self.values else None

    def percentile(self, percent: float) -> float | None:
        """The exact nearest-rank percentile (see :func:`percentile`)."""
        if self._sorted is None:
            self._sorted = sorted(self.values)
        return percentile(self._sorted, percent)


def policy_id(policy: TurnPolicy) -> str:
    """A short, stable name of a policy as its traces show it: the first 8 hex digits of
    a hash of its fields (``turnfsm report --policy`` takes it)."""
    text = json.dumps(policy.to_dict(), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


@attrs.frozen
class CallFilter:
    """Which calls a report counts: those whose policy, agent and day are each among the
    given ones (an empty set takes every value). A call whose trace does not name its
    agent or day has :data:`UNKNOWN` for it."""

    policies: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    days: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.policies or self.agents or self.days)

    def takes(self, trace: Trace) -> bool:
        """Whether ``trace``'s call is one this filter counts."""
        return (
            (not self.policies or policy_id(trace.policy) in self.policies)
            and (not self.agents or (trace.call.agent_name or UNKNOWN) in self.agents)
            and (not self.days or (trace.call.day or UNKNOWN) in self.days)
        )

    def describe(self) -> str:
        parts = [
            f"{name} {' or '.join(sorted(values))}"
            for name, values in (
                ("policy", self.policies),
                ("agent", self.agents),
                ("day", self.days),
            )
            if values
        ]
        return "; ".join(parts)


@attrs.frozen(slots=True)
class CallRow:
    """One call as the report lists it."""

    number: int
    """The order the call was read in, from 1."""
    source: str
    """Where it was read from (a file name), as given to :meth:`CallReport.add`."""
    call_id: str | None
    started_at: str | None
    agent: str
    day: str
    policy: str
    """:func:`policy_id` of the call's policy."""
    direction: str
    duration: float
    end_reason: str
    breaches: tuple[tuple[str, int], ...]
    """Outcome checks the call broke, with how often (``(("O2", 1),)``)."""
    barge_ins: int
    agent_speeches: int
    tool_caps: int
    time_to_greeting: float | None
    timeline: bool
    """The call's timeline was written beside the page (:meth:`CallReport.timeline_href`)."""
    torn: bool
    """The trace's last line was cut short and skipped."""

    @property
    def breach_count(self) -> int:
        return sum(count for _, count in self.breaches)


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
"""The per-call counts of :class:`~turnfsm.tools.metrics.CallMetrics` summed across calls."""


class CallReport:
    """Figures across calls, folded one trace at a time."""

    def __init__(
        self, call_filter: CallFilter | None = None, *, timelines: str = "timelines"
    ) -> None:
        self.filter = call_filter or CallFilter()
        """Which calls were counted (the page says so); the caller applies it."""
        self.timelines = timelines
        """The folder, beside the page, that holds the calls' timelines."""
        self.calls = 0
        self.rows: list[CallRow] = []
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
        self.breaches: Counter[str] = Counter()
        """Outcome check -> times it was broken, over every call."""
        self.paths: Counter[tuple[str, str, str]] = Counter()
        """``(before, event, after)`` -> times a call moved between two states that way
        (the caller's voice too)."""
        self.visits: Counter[str] = Counter()
        """State -> calls that were in it (the caller's voice's states too)."""
        self.policies: dict[str, TurnPolicy] = {}
        """Each policy met, by :func:`policy_id`, in the order first met."""
        self.problems: list[str] = []
        self.unreadable = 0
        self.torn = 0
        """Traces whose torn last line was skipped."""
        self._strings: dict[str, str] = {}

    # -- folding ---------------------------------------------------------------------------

    def add(self, trace: Trace, *, source: str = "", timeline: bool = False) -> None:
        """Count one call; ``source`` names where it came from (a file name, already
        printable: the page escapes it for HTML); ``timeline`` says its timeline was
        written, at :meth:`timeline_href` of the number this call gets (``calls + 1``)."""
        metrics = call_metrics(trace)
        breaches: Counter[str] = Counter()
        for step in trace.steps:
            if step.before != step.after:
                self.paths[(step.before, step.event.name, step.after)] += 1
            if isinstance(step.event, ev.OutcomeBreached):
                breaches[step.event.check] += 1
        voices = set()
        for before, event, after in voice_moves(trace.steps, trace.policy):
            voices.add(after)
            if before is not None:
                self.paths[(before, event, after)] += 1
        self.visits.update(voices)
        self.breaches.update(breaches)
        key = policy_id(trace.policy)
        self.policies.setdefault(key, trace.policy)
        self.add_metrics(metrics)
        self.torn += trace.torn_line is not None
        intern = self._intern
        self.rows.append(
            CallRow(
                number=self.calls,
                source=source,
                call_id=trace.call.call_id,
                started_at=trace.call.started_at,
                agent=intern(trace.call.agent_name or UNKNOWN),
                day=intern(trace.call.day or UNKNOWN),
                policy=intern(key),
                direction=intern(metrics.direction),
                duration=metrics.duration,
                end_reason=intern(metrics.end_reason or "not ended"),
                breaches=tuple(sorted(breaches.items())),
                barge_ins=metrics.barge_ins,
                agent_speeches=metrics.agent_speeches,
                tool_caps=metrics.tool_caps,
                time_to_greeting=metrics.time_to_greeting,
                timeline=timeline,
                torn=trace.torn_line is not None,
            )
        )

    def add_metrics(self, metrics: CallMetrics) -> None:
        """Count one call's metrics (its paths are not drawn, and it gets no row)."""
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

    def _intern(self, text: str) -> str:
        """One string object per distinct agent, day, policy or reason, however many
        rows hold it."""
        return self._strings.setdefault(text, text)

    # -- figures ---------------------------------------------------------------------------

    @property
    def greeted(self) -> int:
        """Calls that reached the greeting."""
        return self.visits["greeting"]

    @property
    def mixed_policies(self) -> bool:
        """Whether the calls ran under more than one policy."""
        return len(self.policies) > 1

    def figures(self) -> dict[str, str]:
        """Every headline figure as shown on the page, by id (tests read them here and
        in the page's ``data-figure`` attributes)."""
        t, w, g = self.totals, self.calls_with, self.to_greeting
        breached = sum(1 for row in self.rows if row.breaches)
        figures = {
            "calls": str(self.calls),
            "policies": str(len(self.policies)),
            "unreadable": str(self.unreadable),
            "torn": str(self.torn),
            "greeting_heard": _share(g.count, self.calls),
            "greeting_mean": _seconds(g.mean),
            "greeting_max": _seconds(g.high),
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
            "breaches": str(sum(self.breaches.values())),
            "calls_with_breach": _share(breached, len(self.rows)),
        }
        for p in PERCENTILES:
            figures[f"greeting_p{p}"] = _seconds(g.percentile(p))
            figures[f"duration_p{p}"] = _seconds(self.durations.percentile(p))
        for reason, count in self.end_reasons.items():
            figures[f"ended_{reason}"] = _share(count, self.calls)
        for check, count in self.breaches.items():
            figures[f"breach_{check}"] = str(count)
        for state, d in self.state_times.items():
            figures[f"state_{state}_calls"] = str(d.count)
            figures[f"state_{state}_mean"] = _seconds(d.mean)
            for p in PERCENTILES[:2]:
                figures[f"state_{state}_p{p}"] = _seconds(d.percentile(p))
            figures[f"state_{state}_share"] = _percent(d.total, self._all_state_time())
        return figures

    def _all_state_time(self) -> float:
        return sum(times.total for times in self.state_times.values())

    def diagram(self) -> Diagram:
        """The machine drawn under the calls' policy when they share one, else whole; the
        greeting as one state, as the traces name it (:func:`collapse_phases`)."""
        (policy,) = self.policies.values() if len(self.policies) == 1 else (None,)
        return collapse_phases(build_diagram(policy=policy))

    def groups(self, key: Callable[[CallRow], str]) -> dict[str, list[CallRow]]:
        """The rows by ``key`` (``lambda row: row.agent``), keys sorted."""
        grouped: dict[str, list[CallRow]] = {}
        for row in self.rows:
            grouped.setdefault(key(row), []).append(row)
        return dict(sorted(grouped.items()))

    # -- the page --------------------------------------------------------------------------

    def render(self, title: str = "turnfsm report") -> str:
        """The whole page as HTML text."""
        return "".join(self.render_parts(title))

    def render_parts(self, title: str = "turnfsm report") -> Iterator[str]:
        """The page in pieces, to write one at a time: the calls table alone is a row per
        call, so the whole page is never held (a few hundred bytes a call)."""
        f = self.figures()
        groups = {
            kind: self.groups(key)
            for kind, key in (
                ("policy", lambda row: row.policy),
                ("agent", lambda row: row.agent),
                ("day", lambda row: row.day),
            )
        }
        tokens = {
            (kind, value): f"{kind[0]}{number}"
            for kind, grouped in groups.items()
            for number, value in enumerate(grouped)
        }
        style = _STYLE + "".join(
            f"#only-{token}:target ~ table.calls tbody tr:not(.{token}) {{ display: none; }}\n"
            f"#only-{token}:target ~ p.showing .all {{ display: none; }}\n"
            f"#only-{token}:target ~ p.showing .{token} {{ display: inline; }}\n"
            for token in tokens.values()
        )
        head, tail = _PAGE.format(title=xml_text(title), style=style, body="\0").split("\0")
        yield head
        yield f"<h1>{xml_text(title)}</h1>\n"
        yield self._lead(f, groups)
        yield self._tiles(f)
        yield self._groups(groups, tokens)
        yield from self._calls(tokens)
        for section in (
            self._endings(f),
            self._greeting(f),
            self._turns(f),
            self._breaches(f),
            self._states(f),
            self._paths(),
            self._problems(),
            _GLOSSARY,
        ):
            yield section + "\n"
        yield tail

    def _lead(self, f: Mapping[str, str], groups: Mapping[str, Mapping[str, object]]) -> str:
        directions = ", ".join(f"{n} {d}" for d, n in sorted(self.directions.items()))
        lead = (
            f'<p class="lead"><b data-figure="calls">{f["calls"]}</b> calls'
            + (f" ({xml_text(directions)})" if directions else "")
            + f' under <b data-figure="policies">{f["policies"]}</b> '
            + ("policy" if len(self.policies) == 1 else "policies")
            + f", {len(groups['agent'])} agent(s), {len(groups['day'])} day(s)"
            + (
                f', <b data-figure="unreadable">{f["unreadable"]}</b> unreadable traces skipped'
                if self.unreadable
                else ""
            )
            + (
                f', <b data-figure="torn">{f["torn"]}</b> with a torn last line skipped'
                if self.torn
                else ""
            )
            + ".</p>"
        )
        if self.filter:
            lead += f'<p class="lead">Only calls of {xml_text(self.filter.describe())}.</p>'
        if self.mixed_policies:
            lead += (
                f'<p class="warning" data-figure="mixed">These calls ran under {f["policies"]} '
                "different policies: the figures below sum them all. Each policy's own "
                'figures are in <a href="#by-policy">By policy</a>; '
                "<code>turnfsm report --policy ID</code> reports one alone.</p>"
            )
        return lead

    def _tiles(self, f: Mapping[str, str]) -> str:
        tiles = [
            ("greeting_p50", "half the callees heard the greeting within"),
            ("greeting_p95", "95% of the callees heard it within"),
            ("overlap_rate", "of greetings overlapped by the callee"),
            ("barge_in_rate", "of agent speeches cut by a barge-in"),
            ("tool_cap_rate", "of calls hit the tool-round cap"),
            ("calls_with_breach", "calls broke an outcome check"),
        ]
        cells = "".join(
            f'<div class="tile"><div class="big" data-figure="{key}">{xml_text(f[key])}</div>'
            f"<div>{xml_text(label)}</div></div>"
            for key, label in tiles
        )
        return f'<section class="tiles">{cells}</section>'

    def _groups(
        self,
        groups: Mapping[str, Mapping[str, list[CallRow]]],
        tokens: Mapping[tuple[str, str], str],
    ) -> str:
        sections = []
        differing = _differing_fields(self.policies)
        for kind, grouped in groups.items():
            headers = [
                kind.capitalize(),
                *(["Settings that differ"] if kind == "policy" else []),
                "Calls",
                "Duration p50",
                *(f"Greeting p{p}" for p in PERCENTILES),
                "Barge-ins",
                "Tool caps",
                "With a breach",
                "Ended",
            ]
            rows = []
            for value, calls in grouped.items():
                token = tokens[(kind, value)]
                settings = (
                    [f'<td class="settings">{_settings(self.policies[value], differing)}</td>']
                    if kind == "policy"
                    else []
                )
                figures = _group_figures(calls)
                rows.append(
                    f'<tr data-group="{token}"><td>{xml_text(value)}</td>{"".join(settings)}'
                    f'<td class="num"><a href="#only-{token}">{len(calls)}</a></td>'
                    + "".join(f'<td class="num">{xml_text(cell)}</td>' for cell in figures)
                    + "</tr>"
                )
            sections.append(
                f'<h3 id="by-{kind}">By {kind}</h3>' + _table(headers, rows, css="groups")
            )
        return _section(
            "Calls by policy, agent and day",
            "<p>Each group's own figures; its number of calls shows only its calls in the "
            "table below. A policy is named by a hash of its settings (texts redacted "
            "unless kept).</p>" + "".join(sections),
        )

    def _calls(self, tokens: Mapping[tuple[str, str], str]) -> Iterator[str]:
        rows = sorted(self.rows, key=lambda row: (row.started_at is None, row.started_at or ""))
        shown = rows[:MAX_CALL_ROWS]
        links = (
            "Each call links to its timeline."
            if any(row.timeline for row in shown)
            else "Timelines are linked when the page is written to a file "
            "(<code>turnfsm report -o report.html</code>)."
        )
        names = "".join(
            f'<span class="{token}">{xml_text(kind)} {xml_text(value)}</span>'
            for (kind, value), token in tokens.items()
        )
        headers = "".join(
            f"<th>{header}</th>"
            for header in (
                "#",
                "Call",
                "Started",
                "Agent",
                "Policy",
                "Duration",
                "End reason",
                "Breaches",
                "Barge-ins",
                "To greeting",
                "Trace",
            )
        )
        yield (
            f'<section id="calls"><h2>Calls</h2><p>Every call, by start. {links}</p>'
            + "".join(f'<span id="only-{token}"></span>' for token in tokens.values())
            + f'<p class="showing">Showing: <span class="all">all calls</span>{names} '
            '(<a href="#calls">show all</a>)</p>'
            f'<table class="calls"><thead><tr>{headers}</tr></thead><tbody>\n'
        )
        for row in shown:
            yield (
                f'<tr class="{tokens[("policy", row.policy)]} {tokens[("agent", row.agent)]} '
                f'{tokens[("day", row.day)]}">'
                f'<td class="num">{row.number}</td><td>{_call_link(row, self.timelines)}</td>'
                f"<td>{xml_text(_start(row.started_at))}</td><td>{xml_text(row.agent)}</td>"
                f"<td>{xml_text(row.policy)}</td>"
                f'<td class="num">{_seconds(row.duration)}</td>'
                f"<td>{xml_text(row.end_reason)}</td>"
                f'<td class="num">{xml_text(_breach_list(row.breaches))}</td>'
                f'<td class="num">{row.barge_ins}</td>'
                f'<td class="num">{_seconds(row.time_to_greeting)}</td>'
                f"<td>{xml_text(row.source)}{' (torn)' if row.torn else ''}</td></tr>\n"
            )
        yield (
            "</tbody></table>"
            + (
                f"<p>The first {len(shown)} of {len(rows)} calls by start are listed; filter the "
                "report to list others.</p>"
                if len(rows) > len(shown)
                else ""
            )
            + "</section>\n"
        )

    def _endings(self, f: Mapping[str, str]) -> str:
        rows = []
        for reason, count in self.end_reasons.most_common():
            bar = _bar(count / self.calls if self.calls else 0.0, "#1d4ed8")
            rows.append(
                f"<tr><td>{xml_text(reason)}</td><td class='num' "
                f"data-figure='ended_{xml_text(reason)}'>{f[f'ended_{reason}']}</td>"
                f"<td>{bar}</td></tr>"
            )
        lengths = ", ".join(
            f"p{p} <b data-figure='duration_p{p}'>{f[f'duration_p{p}']}</b>" for p in PERCENTILES
        )
        return _section(
            "How calls ended",
            _table(("Reason", "Calls", ""), rows)
            + f"<p>Call length, from the first event to the last: mean <b data-figure="
            f"'duration_mean'>{f['duration_mean']}</b>, {lengths}.</p>",
        )

    def _greeting(self, f: Mapping[str, str]) -> str:
        g = self.to_greeting
        labels = [f"≤ {_number(edge)} s" for edge in g.edges] + [f"> {_number(g.edges[-1])} s"]
        histogram = _histogram(labels, g.bins)
        quantiles = ", ".join(
            f"p{p} <b data-figure='greeting_p{p}'>{f[f'greeting_p{p}']}</b>" for p in PERCENTILES
        )
        text = (
            f"<p>The greeting was heard in <b data-figure='greeting_heard'>"
            f"{f['greeting_heard']}</b> calls, counted from the answer to its first audio: "
            f"{quantiles}; mean <b data-figure='greeting_mean'>{f['greeting_mean']}</b>, "
            f"slowest <b data-figure='greeting_max'>{f['greeting_max']}</b>.</p>"
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
            f"<tr><td>{xml_text(label)}</td><td class='num' data-figure='{key}'>{f[key]}</td>"
            + (f"<td class='num' data-figure='{rate}'>{f[rate]}</td>" if rate else "<td></td>")
            + "</tr>"
            for label, key, rate in rows
        ]
        outcomes = ""
        if self.lever_outcomes:
            lines = [
                f"<tr><td>{xml_text(name)}</td><td class='num'>{count}</td></tr>"
                for name, count in sorted(self.lever_outcomes.items())
            ]
            outcomes = "<h3>Levers that did not do their effect</h3>" + _table(
                ("Effect: outcome", "Times"), lines
            )
        return _section(
            "Turns, barge-ins, dropped text and tools",
            _table(("", "Count", "Rate"), cells) + outcomes,
        )

    def _breaches(self, f: Mapping[str, str]) -> str:
        rows = [
            f"<tr><td>{xml_text(check)}</td><td class='num' data-figure='breach_{check}'>"
            f"{f[f'breach_{check}']}</td><td class='num'>"
            f"{sum(1 for row in self.rows if check in dict(row.breaches))}</td></tr>"
            for check in sorted(self.breaches)
        ]
        table = _table(("Check", "Times", "Calls"), rows) if rows else "<p>None.</p>"
        return _section(
            "Outcome breaches",
            "<p>What the session did that a guarantee rules out, as the LiveKit adapter's "
            "outcome monitor saw it (O1 agent audio before the greeting, O2 greeting cut, "
            "O3 a reply to part of an overlap, O4 unheard words kept, O5 a tool round past "
            "the cap, O6 the input left muted): <b data-figure='calls_with_breach'>"
            f"{f['calls_with_breach']}</b> calls broke one, <b data-figure='breaches'>"
            f"{f['breaches']}</b> times in all.</p>" + table,
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
            f"<tr><td>{_swatch(state)} {xml_text(state)}</td>"
            + "".join(
                f"<td class='num' data-figure='state_{state}_{figure}'>"
                f"{f[f'state_{state}_{figure}']}</td>"
                for figure in ("calls", "share", "mean", "p50", "p95")
            )
            + f"<td>{_histogram_inline(self.state_times[state])}</td></tr>"
            for state in order
        ]
        return _section(
            "Time in each state",
            stacked
            + _table(
                ("State", "Calls in it", "Share of all time", "Mean", "p50", "p95", ""),
                rows,
            ),
        )

    def _paths(self) -> str:
        diagram = self.diagram()
        svg = overlay_svg(diagram, self.paths, self.visits, self.calls)
        rows = [
            f"<tr><td>{xml_text(before)} → {xml_text(after)}</td><td>{xml_text(event)}</td>"
            f"<td class='num'>{count}</td></tr>"
            for (before, event, after), count in sorted(
                self.paths.items(), key=lambda item: (-item[1], item[0])
            )
        ]
        return _section(
            "Paths through the machine",
            f"<p>{xml_text(diagram.title)}: every call's moves between states, summed, the "
            "caller's voice beside the turn included. Line width grows with the count; grey "
            "dashed moves were never taken.</p>" + svg + _table(("Move", "Event", "Times"), rows),
        )

    def _problems(self) -> str:
        if not self.problems:
            return ""
        items = "".join(f"<li>{xml_text(problem)}</li>" for problem in self.problems)
        more = self.unreadable - len(self.problems)
        tail = f"<p>… and {more} more.</p>" if more > 0 else ""
        return _section("Unreadable traces", f"<ul>{items}</ul>{tail}")


def build_report(traces: Iterable[Trace]) -> CallReport:
    """Fold ``traces`` (any iterable: a generator keeps one trace in memory at a time)."""
    report = CallReport()
    for trace in traces:
        report.add(trace)
    return report


def voice_moves(
    steps: Iterable[TraceStep], policy: TurnPolicy
) -> Iterator[tuple[str | None, str, str]]:
    """The caller's voice through a call, as the chart moves it, from the steps (a trace
    records the turn's state only): ``(None, event, "caller_silent")`` when the call goes
    live, ``("caller_silent", "user_speech_started", "caller_speaking")`` when the caller
    starts speaking while the input is not muted, back on ``user_speech_ended`` (to
    ``caller_spoke_over_greeting`` in a greeting that answers an overlap whole, silent
    again once it is left) or when a step mutes the input. A bounded trace that lost its
    start begins silent."""
    silent, speaking, spoke_over = VOICE_STATES
    over_greeting = not policy.mutes_greeting and policy.greeting_overlap == "answer_whole"
    voice: str | None = None
    muted = False
    for step in steps:
        event = step.event.name
        if step.after not in LIVE_STATES:
            voice = None
        elif voice is None:
            voice = silent
            yield None, event, silent
        elif event == "user_speech_started" and voice != speaking and not muted:
            yield voice, event, speaking
            voice = speaking
        elif event == "user_speech_ended" and voice == speaking:
            voice = spoke_over if over_greeting and step.before == "greeting" else silent
            yield speaking, event, voice
        for effect in step.effects:
            if isinstance(effect, fx.MuteInput | fx.UnmuteInput):
                muted = isinstance(effect, fx.MuteInput)
        if muted and voice == speaking:  # the chart's eventless move: a muted input is silent
            voice = silent
            yield speaking, event, silent
        if voice == spoke_over and step.after != "greeting":  # eventless: the greeting left
            voice = silent
            yield spoke_over, event, silent


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
        f'aria-label="{xml_text(diagram.title)}">'
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
        f'<g><title>{xml_text(tip)}: {count}</title><path d="{path}" fill="none" '
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
        f"<g><title>{xml_text(state)}: {xml_text(share)}</title>"
        f'<rect x="{x:.0f}" y="{y - _BOX_H / 2:.0f}" width="{_BOX_W}" height="{_BOX_H}" rx="8" '
        f'fill="{fill}" stroke="{stroke}" stroke-width="2"{final}/>'
        f'<text x="{_MID}" y="{y - 3:.0f}" text-anchor="middle" class="state"{ink}>'
        f"{xml_text(state + lock)}</text>"
        f'<text x="{_MID}" y="{y + 13:.0f}" text-anchor="middle" class="visits"{ink}>'
        f"{xml_text(share)}</text></g>"
    )


def _dark(colour: str) -> bool:
    """Whether a ``#rrggbb`` fill needs white text."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.299 * red + 0.587 * green + 0.114 * blue < 128


# -- small pieces of the page -------------------------------------------------------------------


def _group_figures(rows: Sequence[CallRow]) -> list[str]:
    """A group's cells after its name (and settings): duration p50, greeting p50/p95/p99,
    barge-ins per speech, tool-cap calls, calls with a breach, the commonest endings."""
    durations = sorted(row.duration for row in rows)
    greetings = sorted(row.time_to_greeting for row in rows if row.time_to_greeting is not None)
    speeches = sum(row.agent_speeches for row in rows)
    barge_ins = sum(row.barge_ins for row in rows)
    endings = Counter(row.end_reason for row in rows).most_common(3)
    return [
        _seconds(percentile(durations, 50)),
        *(_seconds(percentile(greetings, p)) for p in PERCENTILES),
        f"{barge_ins} ({_percent(barge_ins, speeches)})",
        _share(sum(1 for row in rows if row.tool_caps), len(rows)),
        _share(sum(1 for row in rows if row.breaches), len(rows)),
        ", ".join(f"{reason} {count}" for reason, count in endings),
    ]


def _differing_fields(policies: Mapping[str, TurnPolicy]) -> list[str]:
    """The policy fields whose values differ among ``policies`` (all of them for one)."""
    tables = [policy.to_dict() for policy in policies.values()]
    if len(tables) < 2:
        return list(tables[0]) if tables else []
    return [name for name in tables[0] if len({json.dumps(t[name]) for t in tables}) > 1]


def _settings(policy: TurnPolicy, fields: Sequence[str]) -> str:
    """``name value`` pairs on a line, texts unquoted (``greeting_lock mute_input``)."""
    data = policy.to_dict()
    return "; ".join(
        f"{xml_text(name)} <b>{xml_text(_setting(data[name]))}</b>" for name in fields
    )


def _setting(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _call_link(row: CallRow, timelines: str) -> str:
    name = xml_text(row.call_id if row.call_id is not None else f"call {row.number}")
    if not row.timeline:
        return name
    return f'<a href="{xml_text(f"{timelines}/{timeline_file(row.number)}")}">{name}</a>'


def timeline_file(number: int) -> str:
    """The file name of the timeline of the call read ``number``-th."""
    return f"call-{number:06d}.svg"


def _start(started_at: str | None) -> str:
    return "–" if started_at is None else started_at.replace("T", " ")


def _breach_list(breaches: Sequence[tuple[str, int]]) -> str:
    return " ".join(f"{check}×{count}" for check, count in breaches) or "0"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "–"


def _share(part: int, whole: int) -> str:
    return f"{part} ({_percent(part, whole)})"


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def _number(value: float) -> str:
    return f"{value:g}"


def _section(title: str, content: str) -> str:
    return f"<section><h2>{xml_text(title)}</h2>{content}</section>"


def _table(headers: Sequence[str], rows: Sequence[str], css: str = "") -> str:
    head = "".join(f"<th>{xml_text(h)}</th>" for h in headers)
    attribute = f' class="{css}"' if css else ""
    return (
        f"<table{attribute}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _bar(fraction: float, colour: str) -> str:
    width = max(0.0, min(1.0, fraction)) * 240
    return (
        f'<svg width="240" height="12" aria-hidden="true"><rect width="240" height="12" '
        f'fill="#e2e8f0"/><rect width="{width:.1f}" height="12" fill="{colour}"/></svg>'
    )


def _histogram(labels: Sequence[str], bins: Sequence[int]) -> str:
    peak = max(bins, default=0) or 1
    rows = [
        f"<tr><td>{xml_text(label)}</td><td class='num'>{count}</td>"
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
        f"{xml_text(_bin_label(distribution.edges, i))}: {n}</title></rect>"
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
            f'fill="{STATE_COLOURS.get(state, OTHER_STATE)}"><title>{xml_text(state)}: '
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
<li><b>p50, p95, p99</b>: exact, by nearest rank: the smallest time that at least half, 95% or
99% of the calls took no longer than (a time some call really took).</li>
<li><b>Overlap</b>: the callee started speaking while the greeting played.</li>
<li><b>Barge-in</b>: an agent speech the callee interrupted, while the call was live, after
some of its audio played.</li>
<li><b>Discarded speech</b>: an agent speech stopped before any of its audio played, such as
a reply LiveKit prepared early and threw away (preemptive generation); not a barge-in.</li>
<li><b>Dropped text</b>: the part of an interrupted reply the caller never heard, removed
from the history, as the drop's lever measured it (the words played to their end, told
in lengths in its outcome); a drop is unmeasured when no such outcome is in the trace (the
lever refused or failed, or the trace is older than format 4). A speech
LiveKit committed no text for left nothing to drop (nor is that lever's refusal counted).</li>
<li><b>Tool-round cap</b>: the policy's <code>max_tool_steps</code> reached; one final reply
without tools was asked for.</li>
<li><b>Outcome breach</b>: the LiveKit adapter's outcome monitor saw the session break a
guarantee (traced as <code>outcome_breached</code>).</li>
<li><b>Policy</b>: named by a hash of its settings as the trace holds them; a call's agent
and day come from its trace's header (<code>unknown</code> for a trace written before it
held them).</li>
</ul></section>"""

_STYLE = """
body { font: 15px/1.45 Helvetica, Arial, sans-serif; color: #0f172a; margin: 24px auto;
  max-width: 1280px; padding: 0 16px; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #cbd5e1; padding-bottom: 4px; }
.lead { color: #334155; }
.warning { background: #fef3c7; border-left: 4px solid #d97706; padding: 8px 12px; }
.tiles { display: grid; grid-template-columns: repeat(3, 1fr); gap: 12px; }
.tile { background: #f1f5f9; border-radius: 8px; padding: 12px; }
.big { font-size: 28px; font-weight: bold; color: #1d4ed8; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e2e8f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.calls td, table.groups td { font-size: 13px; }
table.calls td { white-space: nowrap; }
table.groups td.settings { font-size: 12px; color: #334155; max-width: 420px; }
table.calls thead th { position: sticky; top: 0; background: #ffffff; }
p.showing span:not(.all) { display: none; }
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
