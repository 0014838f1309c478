"""A recorded call drawn as one SVG timeline.

:func:`render_timeline` turns a :class:`~turnfsm.trace.Trace` into a self-contained SVG
(no dependency, no I/O) with one lane each for the machine's state, the user's
speech and committed turns, the agent's speeches (pending, played, interrupted, the
locked greeting), tool rounds, timers, and the other effects; a time axis in seconds
since the first step, and a legend. Every mark has a ``<title>``, shown on hover.

A trace is untrusted input: every string taken from it is escaped
(:func:`turnfsm.tools.escape.xml_text`), so the SVG is valid XML whatever the ids and texts
hold; the drawing takes time linear in the trace (plus a log factor for packing rows);
a step stamped earlier than the one before it (a clock that jumped back) is drawn at the
time of the one before, and the title counts such jumps.

>>> from turnfsm import TurnController, TurnPolicy, events
>>> controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi"))
>>> _ = controller.handle(events.CallAnswered(at=1.0))
>>> render_timeline(controller.trace).startswith("<svg")
True
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import TypeVar
from xml.sax.saxutils import quoteattr

import attrs

from .. import effects as fx
from .. import events as ev
from ..machine import LOCKED_STATES, TurnMachine
from ..trace import Trace, TraceStep
from .escape import xml_text

WIDTH = 1200
LEFT = 150
RIGHT = 30
TOP = 48
ROW = 22
PAD = 6
BAR = 14
FONT = "Helvetica, Arial, sans-serif"

STATE_COLOURS: dict[str, str] = {
    "ringing": "#b0bec5",
    "awaiting_user": "#ffcc80",
    "greeting": "#ce93d8",
    "listening": "#90caf9",
    "speaking": "#a5d6a7",
    "tool_loop": "#fff59d",
    "ended": "#616161",
}
"""Fill of each state's spans; a state without one (a subclass's) is drawn grey."""

OTHER_STATE = "#e0e0e0"
USER = "#26a69a"
PENDING = "#eeeeee"
PLAYED = "#43a047"
INTERRUPTED = "#e53935"
LOCKED = "#8e24aa"
TOOLS = "#f9a825"
TIMER = "#1e88e5"
FIRED = "#d81b60"


@attrs.frozen
class _Marker:
    row: str
    shape: str
    colour: str
    legend: str


EFFECT_MARKERS: dict[str, _Marker] = {
    "mute_input": _Marker("input", "down", "#ef6c00", "mute input"),
    "unmute_input": _Marker("input", "up", "#ef6c00", "unmute input"),
    "hold_user_turns": _Marker("input", "open-square", USER, "hold user turns"),
    "resume_user_turns": _Marker("input", "square", USER, "resume user turns"),
    "start_greeting": _Marker("speech", "circle", LOCKED, "start greeting"),
    "lock_speech": _Marker("speech", "square", LOCKED, "lock speech"),
    "interrupt": _Marker("speech", "cross", INTERRUPTED, "interrupt"),
    "drop_unspoken_text": _Marker("speech", "down", INTERRUPTED, "drop unspoken text"),
    "say": _Marker("speech", "circle", PLAYED, "say"),
    "reject_user_turn": _Marker("speech", "open-diamond", "#616161", "reject user turn"),
    "clear_user_turn": _Marker("speech", "cross", "#616161", "clear user turn"),
    "cancel_tool_reply": _Marker("speech", "cross", TOOLS, "cancel tool reply"),
    "final_reply_without_tools": _Marker("speech", "circle", TOOLS, "final reply, no tools"),
    "hold_tool_reply": _Marker("speech", "open-diamond", TOOLS, "hold tool reply"),
    "release_tool_reply": _Marker("speech", "diamond", TOOLS, "release tool reply"),
    "end_call": _Marker("call", "square", "#212121", "end call"),
    "suppress_reply": _Marker("speech", "cross", LOCKED, "suppress model reply"),
    "pause_model_replies": _Marker("input", "open-diamond", LOCKED, "pause model replies"),
    "resume_model_replies": _Marker("input", "diamond", LOCKED, "resume model replies"),
    "forbid_tools": _Marker("speech", "open-square", TOOLS, "forbid tools"),
    "allow_tools": _Marker("speech", "square", TOOLS, "allow tools"),
}
"""How each effect is marked in the Effects lane; timers have a lane of their own."""

OTHER_EFFECT = _Marker("call", "circle", "#616161", "other effect")
"""The marker of an effect without one of its own (a subclass's)."""

NUDGE = 9.0
"""Pixels between marks of one effects row drawn at the same instant."""

EFFECT_ROWS: tuple[str, ...] = ("input", "speech", "call")

_LEGEND_MARK = (10.0, 0.0)
"""Where a legend entry draws its marker, left of its text."""


@attrs.define
class _Span:
    start: float
    end: float | None = None
    detail: str = ""


@attrs.define
class _Speech:
    speech_id: str
    created: float
    source: str = ""
    started: float | None = None
    ended: float | None = None
    interrupted: bool = False
    locked: bool = False


@attrs.define
class _Lane:
    key: str
    label: str
    rows: list[str]
    top: float = 0.0

    @property
    def height(self) -> float:
        return max(1, len(self.rows)) * ROW + 2 * PAD

    def row_y(self, row: int) -> float:
        """The vertical centre of ``row``."""
        return self.top + PAD + row * ROW + ROW / 2


def render_timeline(trace: Trace) -> str:
    """The call in ``trace`` as an SVG document (a string).

    Times are seconds since the trace's first step. An empty trace draws empty lanes.
    """
    return _Timeline(trace).render()


class _Timeline:
    """One rendering: the trace's spans and marks, then the SVG built from them."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.timed, self.jumps = _timed(trace)
        self.last = self.timed[-1][1] if self.timed else 0.0
        self.tick = _tick_step(self.last)
        # rounded up to a tick, unless that overflows (times near the largest float)
        end = math.ceil(self.last / self.tick) * self.tick
        self.end = max(self.tick, end if math.isfinite(end) else self.last)
        self.out: list[str] = []
        self.legend: dict[str, str] = {}

    def x(self, seconds: float) -> float:
        """Where a time (seconds since the first step) is drawn."""
        return LEFT + seconds / self.end * (WIDTH - LEFT - RIGHT)

    def render(self) -> str:
        speeches = list(_rows_of_speeches(self._speeches()))
        tools = _rows(self._tool_rounds())
        lanes = [
            _Lane("state", "FSM state", [""]),
            _Lane("user", "User speech", ["speech", "turns"]),
            _Lane("agent", "Agent speech", [""] * (1 + max((r for r, _ in speeches), default=0))),
            _Lane("tools", "Tool rounds", [""] * max(1, len(tools))),
            _Lane("timers", "Timers", list(fx.TIMER_NAMES)),
            _Lane("effects", "Effects", list(EFFECT_ROWS)),
        ]
        y: float = TOP
        for lane in lanes:
            lane.top = y
            y += lane.height
        by_key = {lane.key: lane for lane in lanes}
        self._lane_backgrounds(lanes, y)
        self._states(by_key["state"])
        self._user(by_key["user"])
        self._agent(by_key["agent"], speeches)
        self._tools(by_key["tools"], tools)
        self._timers(by_key["timers"])
        self._effects(by_key["effects"])
        axis_y = y + 4
        self._axis(axis_y)
        height = self._legend(axis_y + 40)
        title = (
            f"Call timeline: {self.trace.policy.direction} call, {len(self.trace)} steps, "
            f"{_seconds(self.last)} s"
        )
        if self.jumps:
            title += f", {self.jumps} backward time jump{'s' if self.jumps != 1 else ''}"
        if self.trace.dropped:
            title += f" (the first {self.trace.dropped} steps were not kept)"
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="{FONT}" font-size="11" '
            f'data-duration="{_seconds(self.last)}">'
        )
        defs = (
            '<defs><pattern id="locked-hatch" width="6" height="6" '
            'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{LOCKED}" stroke-width="2"/>'
            "</pattern></defs>"
        )
        background = f'<rect width="{WIDTH}" height="{height:.0f}" fill="#ffffff"/>'
        heading = f'<text x="12" y="24" font-size="15" font-weight="bold">{xml_text(title)}</text>'
        return "\n".join([head, defs, background, heading, *self.out, "</svg>"]) + "\n"

    # -- data from the trace --------------------------------------------------------------

    def _speeches(self) -> list[_Speech]:
        speeches: dict[str, _Speech] = {}
        for step, at in self.timed:
            event = step.event
            if isinstance(event, ev.AgentSpeechCreated):
                speeches[event.speech_id] = _Speech(event.speech_id, at, source=event.source)
            elif isinstance(event, (ev.AgentSpeechStarted, ev.AgentSpeechEnded)):
                speech = speeches.setdefault(event.speech_id, _Speech(event.speech_id, at))
                if isinstance(event, ev.AgentSpeechStarted):
                    speech.started = at
                else:
                    speech.ended, speech.interrupted = at, event.interrupted
            for effect in step.effects:
                if isinstance(effect, fx.LockSpeech) and effect.speech_id in speeches:
                    speeches[effect.speech_id].locked = True
        return list(speeches.values())

    def _tool_rounds(self) -> list[_Span]:
        open_rounds: dict[str, deque[_Span]] = {}
        rounds: list[_Span] = []
        for step, at in self.timed:
            event = step.event
            if isinstance(event, ev.ToolStepStarted):
                span = _Span(at, detail=f"{event.calls} call{'s' if event.calls != 1 else ''}")
                open_rounds.setdefault(event.speech_id, deque()).append(span)
                rounds.append(span)
            elif isinstance(event, ev.ToolStepFinished) and open_rounds.get(event.speech_id):
                open_rounds[event.speech_id].popleft().end = at
        return rounds

    # -- lanes ----------------------------------------------------------------------------

    def _lane_backgrounds(self, lanes: list[_Lane], bottom: float) -> None:
        for index, lane in enumerate(lanes):
            fill = "#f7f7f7" if index % 2 == 0 else "#ffffff"
            self.out.append(
                f'<g class="lane" data-lane="{lane.key}">'
                f'<rect x="0" y="{lane.top:.1f}" width="{WIDTH}" height="{lane.height:.1f}" '
                f'fill="{fill}"/>'
                f'<text class="lane-label" x="12" y="{lane.top + lane.height / 2 + 4:.1f}" '
                f'font-size="12" font-weight="bold">{xml_text(lane.label)}</text>'
            )
            for row, name in enumerate(lane.rows):
                if name:
                    self.out.append(
                        f'<text x="{LEFT - 8}" y="{lane.row_y(row) + 3:.1f}" font-size="9" '
                        f'fill="#757575" text-anchor="end">{xml_text(name)}</text>'
                    )
            self.out.append("</g>")
        for seconds in _ticks(self.end, self.tick):
            x = self.x(seconds)
            self.out.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom:.1f}" '
                'stroke="#dddddd" stroke-width="1"/>'
            )

    def _states(self, lane: _Lane) -> None:
        if not self.trace.steps:
            return
        spans: list[tuple[str, float, float]] = []
        state, since = self.trace.steps[0].before, 0.0
        for step, at in self.timed:
            if step.after != state:
                spans.append((state, since, at))
                state, since = step.after, at
        final = {s.id for s in TurnMachine.states if s.final}
        spans.append((state, since, self.end if state in final else self.last))
        y = lane.row_y(0) - BAR / 2
        for state, start, end in spans:
            x, width = self.x(start), max(3.0, self.x(end) - self.x(start))
            colour = STATE_COLOURS.get(state, OTHER_STATE)
            locked = state in LOCKED_STATES
            label = f"{state} (locked)" if locked else state
            tip = f"{label}: {_seconds(start)}–{_seconds(end)} s"
            self.out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" '
                f'fill="{colour}" stroke="#ffffff"><title>{xml_text(tip)}</title></rect>'
            )
            if locked:
                self.out.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" '
                    f'fill="url(#locked-hatch)" fill-opacity="0.35" stroke="{LOCKED}" '
                    'stroke-width="1.5"/>'
                )
            self._bar_text(x, width, lane.row_y(0), label, "#ffffff" if state in final else None)
            self.legend.setdefault(f"state: {state}", _swatch(colour, locked))

    def _user(self, lane: _Lane) -> None:
        spans: list[_Span] = []
        for step, at in self.timed:
            event = step.event
            if isinstance(event, ev.UserSpeechStarted):
                spans.append(_Span(at))
            elif isinstance(event, ev.UserSpeechEnded) and spans and spans[-1].end is None:
                spans[-1].end = at
            elif isinstance(event, ev.UserTurnCommitted):
                rejected = any(isinstance(e, fx.RejectUserTurn) for e in step.effects)
                shape = "open-diamond" if rejected else "diamond"
                what = "rejected turn" if rejected else "committed turn"
                self._mark(shape, USER, self.x(at), lane.row_y(1), f"{what} at {_seconds(at)} s")
                self.legend.setdefault(what, _mark_svg(shape, USER, *_LEGEND_MARK))
        for span in spans:
            self._span(lane.row_y(0), span, USER, "user speaking")
            self.legend.setdefault("user speech", _swatch(USER))

    def _agent(self, lane: _Lane, speeches: list[tuple[int, _Speech]]) -> None:
        for row, speech in speeches:
            y = lane.row_y(row)
            end = speech.ended if speech.ended is not None else self.last
            playing = speech.started if speech.started is not None else end
            name = f"{speech.speech_id} ({speech.source})" if speech.source else speech.speech_id
            self._span(y, _Span(speech.created, playing), PENDING, f"{name} pending", dashed=True)
            self.legend.setdefault("speech pending", _swatch(PENDING, dashed=True))
            if speech.started is None:
                continue
            colour, what = (
                (INTERRUPTED, "interrupted") if speech.interrupted else (PLAYED, "played")
            )
            if speech.locked:
                colour, what = LOCKED, f"locked greeting, {what}"
            self._span(y, _Span(speech.started, end), colour, f"{name} {what}", label=name)
            self.legend.setdefault(
                "locked greeting" if speech.locked else f"speech {what}", _swatch(colour)
            )
            if speech.interrupted:
                self._mark("cross", INTERRUPTED, self.x(end), y, f"{name} interrupted")

    def _tools(self, lane: _Lane, rows: list[list[_Span]]) -> None:
        for row, spans in enumerate(rows):
            for span in spans:
                self._span(
                    lane.row_y(row), span, TOOLS, f"tool round, {span.detail}", label=span.detail
                )
                self.legend.setdefault("tool round", _swatch(TOOLS))

    def _timers(self, lane: _Lane) -> None:
        running: dict[str, _Span] = {}
        rows = {name: index for index, name in enumerate(lane.rows)}
        for step, at in self.timed:
            if isinstance(step.event, ev.TimerExpired) and step.event.timer in running:
                self._timer_end(lane, rows, step.event.timer, running.pop(step.event.timer), at)
                y = lane.row_y(rows[step.event.timer])
                self._mark("star", FIRED, self.x(at), y, f"{step.event.timer} timer fired")
                self.legend.setdefault("timer fired", _mark_svg("star", FIRED, *_LEGEND_MARK))
            for effect in step.effects:
                if isinstance(effect, fx.StartTimer):
                    if effect.timer in running:
                        self._timer_end(lane, rows, effect.timer, running.pop(effect.timer), at)
                    span = _Span(at, detail=f"{effect.timer} timer, {_seconds(effect.seconds)} s")
                    running[effect.timer] = span
                    y = lane.row_y(rows[effect.timer])
                    self._mark("circle", TIMER, self.x(at), y, f"start {span.detail}")
                    self.legend.setdefault(
                        "start timer", _mark_svg("circle", TIMER, *_LEGEND_MARK)
                    )
                elif isinstance(effect, fx.CancelTimer) and effect.timer in running:
                    self._timer_end(lane, rows, effect.timer, running.pop(effect.timer), at)
                    y = lane.row_y(rows[effect.timer])
                    self._mark("bar", TIMER, self.x(at), y, f"cancel {effect.timer} timer")
                    self.legend.setdefault("cancel timer", _mark_svg("bar", TIMER, *_LEGEND_MARK))
        for name, span in running.items():
            self._timer_end(lane, rows, name, span, self.last)

    def _timer_end(
        self, lane: _Lane, rows: dict[str, int], name: str, span: _Span, end: float
    ) -> None:
        y = lane.row_y(rows[name])
        x1, x2 = self.x(span.start), self.x(end)
        self.out.append(
            f'<line x1="{x1:.1f}" y1="{y:.1f}" x2="{x2:.1f}" y2="{y:.1f}" stroke="{TIMER}" '
            f'stroke-width="3" stroke-opacity="0.5"><title>{xml_text(span.detail)} running, '
            f"{_seconds(span.start)}–{_seconds(end)} s</title></line>"
        )
        self.legend.setdefault("timer running", _swatch(TIMER, thin=True))

    def _effects(self, lane: _Lane) -> None:
        last_x: dict[str, float] = {}
        for step, at in self.timed:
            for effect in step.effects:
                if isinstance(effect, (fx.StartTimer, fx.CancelTimer)):
                    continue
                marker = EFFECT_MARKERS.get(effect.name, OTHER_EFFECT)
                # Effects of one instant are nudged apart so that each stays visible. Time
                # never goes back here (see _timed), so only the row's last mark can be near.
                x = self.x(at)
                if marker.row in last_x:
                    x = max(x, last_x[marker.row] + NUDGE)
                last_x[marker.row] = x
                y = lane.row_y(EFFECT_ROWS.index(marker.row))
                self._mark(
                    marker.shape, marker.colour, x, y, f"{_describe(effect)} at {_seconds(at)} s"
                )
                self.legend.setdefault(
                    marker.legend, _mark_svg(marker.shape, marker.colour, *_LEGEND_MARK)
                )

    # -- axis and legend --------------------------------------------------------------------

    def _axis(self, y: float) -> None:
        ticks = _ticks(self.end, self.tick)
        self.out.append(
            f'<g class="axis" data-start="0" data-end="{_seconds(self.end)}">'
            f'<line x1="{self.x(0):.1f}" y1="{y:.1f}" x2="{self.x(self.end):.1f}" y2="{y:.1f}" '
            'stroke="#424242"/>'
        )
        for seconds in ticks:
            x = self.x(seconds)
            self.out.append(
                f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 5:.1f}" stroke="#424242"/>'
                f'<text class="tick" x="{x:.1f}" y="{y + 17:.1f}" text-anchor="middle">'
                f"{_seconds(seconds)}</text>"
            )
        self.out.append(
            f'<text x="{LEFT - 8}" y="{y + 17:.1f}" text-anchor="end" fill="#616161">'
            "seconds</text></g>"
        )

    def _legend(self, y: float) -> float:
        """Draw the legend from ``y``; returns the document's height."""
        self.out.append(
            f'<g class="legend"><text x="12" y="{y + 4:.1f}" font-weight="bold">Legend</text>'
        )
        x, column = LEFT, 160
        for label, sample in self.legend.items():
            if x + column > WIDTH - RIGHT:
                x, y = LEFT, y + 20
            self.out.append(
                f'<g transform="translate({x:.1f},{y:.1f})">{sample}'
                f'<text x="26" y="4">{xml_text(label)}</text></g>'
            )
            x += column
        self.out.append("</g>")
        return y + 24

    # -- drawing helpers ------------------------------------------------------------------

    def _span(
        self,
        y: float,
        span: _Span,
        colour: str,
        tip: str,
        *,
        label: str = "",
        dashed: bool = False,
    ) -> None:
        end = span.end if span.end is not None else self.last
        x, width = self.x(span.start), max(3.0, self.x(end) - self.x(span.start))
        stroke = ' stroke="#9e9e9e" stroke-dasharray="3,2"' if dashed else ""
        self.out.append(
            f'<rect x="{x:.1f}" y="{y - BAR / 2:.1f}" width="{width:.1f}" height="{BAR}" '
            f'rx="3" fill="{colour}"{stroke}>'
            f"<title>{xml_text(tip)}: {_seconds(span.start)}–{_seconds(end)} s</title></rect>"
        )
        if label:
            self._bar_text(x, width, y, label, "#ffffff")

    def _bar_text(self, x: float, width: float, y: float, text: str, fill: str | None) -> None:
        if len(text) * 6.2 + 6 > width:
            return
        colour = fill or "#212121"
        self.out.append(
            f'<text x="{x + 4:.1f}" y="{y + 4:.1f}" fill="{colour}" font-size="10">'
            f"{xml_text(text)}</text>"
        )

    def _mark(self, shape: str, colour: str, x: float, y: float, tip: str) -> None:
        self.out.append(f"<g>{_mark_svg(shape, colour, x, y)}<title>{xml_text(tip)}</title></g>")


# -- pure helpers -----------------------------------------------------------------------------


def _tick_step(duration: float) -> float:
    """A 1, 2 or 5 times a power of ten giving at most 15 ticks over ``duration``."""
    if duration <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(duration / 15))  # a float: no huge ints
    return next(step * magnitude for step in (1, 2, 5, 10) if duration / (step * magnitude) <= 15)


def _ticks(end: float, step: float) -> list[float]:
    return [index * step for index in range(round(end / step) + 1) if index * step <= end]


def _seconds(value: float) -> str:
    """``12``, ``12.5``, ``0.25``: seconds without trailing zeros; ``1.7e+308`` (exact,
    as Python writes it) for times too large to write out in full."""
    if value >= 1e12:
        return repr(float(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


_Item = TypeVar("_Item")


def _timed(trace: Trace) -> tuple[list[tuple[TraceStep, float]], int]:
    """Each step with its time in seconds since the first step, never decreasing, and how
    many steps were stamped earlier than the one before (drawn at that one's time)."""
    timed: list[tuple[TraceStep, float]] = []
    jumps = 0
    t0 = trace.steps[0].at if trace.steps else 0.0
    now = 0.0
    for step in trace:
        at = step.at - t0
        if at < now:
            jumps += 1
        now = max(now, at)
        timed.append((step, now))
    return timed, jumps


def _rows(spans: list[_Span]) -> list[list[_Span]]:
    """Spans packed into the fewest rows in which none overlap (in start order): each
    goes to the lowest row free at its start."""
    rows: list[list[_Span]] = []
    for row, span in _packed(sorted(spans, key=lambda s: s.start), lambda s: (s.start, s.end)):
        if row == len(rows):
            rows.append([])
        rows[row].append(span)
    return rows


def _rows_of_speeches(speeches: list[_Speech]) -> Iterable[tuple[int, _Speech]]:
    ordered = sorted(speeches, key=lambda s: s.created)
    return _packed(ordered, lambda s: (s.created, s.ended))


def _packed(
    items: list[_Item], extent: Callable[[_Item], tuple[float, float | None]]
) -> Iterable[tuple[int, _Item]]:
    """``(row, item)`` for items in start order: the lowest row whose last item ended by
    the item's start, else a new row. An item without an end keeps its row for good."""
    busy: list[tuple[float, int]] = []  # (end, row) of the rows in use, soonest end first
    free: list[int] = []  # rows free again, lowest first
    rows = 0
    for item in items:
        start, end = extent(item)
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            row = heapq.heappop(free)
        else:
            row, rows = rows, rows + 1
        heapq.heappush(busy, (math.inf if end is None else end, row))
        yield row, item


def _describe(effect: fx.Effect) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in attrs.asdict(effect).items())
    return f"{effect.name}({fields})"


def _swatch(colour: str, locked: bool = False, *, dashed: bool = False, thin: bool = False) -> str:
    if thin:
        return (
            f'<line x1="0" y1="0" x2="20" y2="0" stroke="{colour}" stroke-width="3" '
            'stroke-opacity="0.5"/>'
        )
    stroke = ' stroke="#9e9e9e" stroke-dasharray="3,2"' if dashed else ""
    swatch = f'<rect x="0" y="-6" width="20" height="12" rx="2" fill="{colour}"{stroke}/>'
    if locked:
        swatch += (
            '<rect x="0" y="-6" width="20" height="12" rx="2" fill="url(#locked-hatch)" '
            f'fill-opacity="0.35" stroke="{LOCKED}" stroke-width="1.5"/>'
        )
    return swatch


def _mark_svg(shape: str, colour: str, x: float, y: float) -> str:
    """A marker centred on ``(x, y)``."""
    r = 5.0
    fill = quoteattr(colour)
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r - 1}" fill={fill}/>'
    if shape == "square":
        return (
            f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" fill={fill}/>'
        )
    if shape == "open-square":
        return (
            f'<rect x="{x - r + 1:.1f}" y="{y - r + 1:.1f}" width="{2 * r - 2}" '
            f'height="{2 * r - 2}" fill="#ffffff" stroke={fill} stroke-width="2"/>'
        )
    if shape == "bar":
        return (
            f'<rect x="{x - 1.5:.1f}" y="{y - r - 1:.1f}" width="3" height="{2 * r + 2}" '
            f"fill={fill}/>"
        )
    if shape == "cross":
        return (
            f'<path d="M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}'
            f'M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}" stroke={fill} stroke-width="2.5"/>'
        )
    points = {
        "up": [(0, -r), (r, r), (-r, r)],
        "down": [(-r, -r), (r, -r), (0, r)],
        "diamond": [(0, -r - 1), (r, 0), (0, r + 1), (-r, 0)],
        "open-diamond": [(0, -r - 1), (r, 0), (0, r + 1), (-r, 0)],
        "star": [
            (
                r * math.sin(i * math.pi / 5) * (1 if i % 2 == 0 else 0.45),
                -r * math.cos(i * math.pi / 5) * (1 if i % 2 == 0 else 0.45),
            )
            for i in range(10)
        ],
    }[shape]
    path = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in points)
    if shape.startswith("open-"):
        return f'<polygon points="{path}" fill="#ffffff" stroke={fill} stroke-width="2"/>'
    return f'<polygon points="{path}" fill={fill}/>'
