"""Traces: every step of a call as data, written and read as JSON lines.

The first line is a header: the format version, the turnfsm version that wrote it, the
call (:class:`CallInfo`: its id, start time and agent) and the policy; each further line
is one step ``{"at", "event", "before", "after", "effects"}``. Traces of every earlier
format (:data:`READ_VERSIONS`) are still read. A trace file is untrusted input: reading is JSON
only, bounded (:data:`MAX_LINE_BYTES`, :data:`MAX_TRACE_BYTES`), and checks every value
(types, ranges, known names and state ids, real Unicode), so whatever is read replays and
draws; anything else raises :class:`TraceFormatError` naming the line. The one exception
is a file's last line cut short (no newline: the writer stopped mid-step): it is skipped,
and :attr:`Trace.torn_line` says so.

Transcript text (what the caller said, what the agent said) and the policy's texts (the
greeting, which often names the callee and the reason for calling; the re-prompt; the
tool-cap fallback) are redacted when a step is recorded unless the controller was asked
to keep them, lengths included: every such text reads ``[redacted]``. :func:`redact` is
the one redaction of every channel (the LiveKit adapter's logs, errors and spans too).

A long call need not be held in memory: a trace can keep only its last steps
(:meth:`Trace.bounded`, what :class:`~turnfsm.TurnController` does by default) and a
:class:`TraceWriter` appends every step to a file as it happens.

>>> header = '{"turnfsm_trace": 1, "policy": {"first_speaker": "user"}}'
>>> Trace.parse([header, '{"at": 1e400}'])
Traceback (most recent call last):
...
turnfsm.trace.TraceFormatError: line 2: number out of range: 1e400
"""

from __future__ import annotations

import collections
import functools
import importlib.metadata
import json
import re
from collections.abc import Iterable, Iterator, MutableSequence
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar, overload

import attrs

from . import effects as fx
from . import events as ev
from .fields import check_fields, show, text_fields
from .invariants import InvariantViolation
from .machine import STATES
from .policy import TurnPolicy

FORMAT_VERSION = 5
"""The format written: 2 names the call and the turnfsm version in the header; 3 names
each timer's expiry as an event of its own (``idle_timer_expired``); 4 measures a cut
reply in its drop's outcome (``effect_outcome``'s ``text_chars`` and ``heard_chars``),
and ``agent_speech_ended`` and ``drop_unspoken_text`` no longer carry ``played_text``;
5: ``drop_unspoken_text`` no longer carries ``played_seconds`` (its lever measures the
cut at the output: nothing read it)."""

READ_VERSIONS: tuple[int, ...] = (1, 2, 3, 4, 5)
"""The formats read: 1 is a header with the policy alone; before 3, a timer's expiry is
``{"name": "timer_fired", "timer": ...}``, read as that timer's own event; the fields a
later format took out (:data:`RETIRED_FIELDS`) are read without them."""

MAX_LINE_BYTES = 1_000_000
"""The longest line read, in bytes, its newline aside (a step is a few hundred bytes): a
longer one is refused before it is held in memory."""

MAX_CALL_TEXT = 1000
"""The longest call id, start time or agent name a header holds."""

MAX_TRACE_BYTES = 200_000_000
"""The largest trace file read by default (a two-hour call is about 5 MB)."""

MAX_NUMBER_DIGITS = 30
"""Integers with more digits are refused (they would overflow times and counts)."""

REDACTED = "[redacted]"
"""What a redacted text reads: the same for every text, so not even its length shows."""


class TraceFormatError(ValueError):
    """A trace line is not valid; the message names the line and the problem."""


_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})")
"""An ISO 8601 date and time with its offset from UTC, e.g. ``2025-06-02T09:30:12Z``."""


@attrs.frozen(kw_only=True)
class CallInfo:
    """Which call a trace records, as its header says: given to the controller (``call=``;
    the LiveKit adapter's ``call_info(ctx)`` fills it from the job). Each is ``None`` when
    unknown (a format 1 trace knows none)."""

    call_id: str | None = None
    """The call's id, e.g. LiveKit's room name."""

    started_at: str | None = None
    """When the call started: ISO 8601 with the offset from UTC (``2025-06-02T09:30:12Z``);
    its first ten characters are the day the report groups it under."""

    agent_name: str | None = None
    """The agent that took the call (LiveKit's ``agent_name``)."""

    def __attrs_post_init__(self) -> None:
        check_fields(self)
        for field in attrs.fields(CallInfo):
            value = getattr(self, field.name)
            if value is not None and len(value) > MAX_CALL_TEXT:
                raise ValueError(
                    f"CallInfo.{field.name} must be at most {MAX_CALL_TEXT} characters, "
                    f"got {len(value)}"
                )
        if self.started_at is not None and not _ISO_TIME.fullmatch(self.started_at):
            raise ValueError(
                "CallInfo.started_at must be an ISO 8601 time with its offset from UTC, "
                f"e.g. 2025-06-02T09:30:12Z, got {show(self.started_at)}"
            )

    @property
    def day(self) -> str | None:
        """The day the call started (``2025-06-02``), in the offset it was written with."""
        return None if self.started_at is None else self.started_at[:10]


@functools.cache
def turnfsm_version() -> str:
    """The installed turnfsm's version, written in every trace header (``0+unknown`` for a
    source tree never installed)."""
    try:
        return importlib.metadata.version("turnfsm")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


@attrs.frozen
class TraceStep:
    """One step: the event, the state before and after, and the effects in order."""

    at: float
    event: ev.Event
    before: str
    after: str
    effects: tuple[fx.Effect, ...]


class StepRing(collections.deque[TraceStep]):
    """The steps of a bounded trace: a ring buffer that slices and compares like a list."""

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return list(self)[index]
        return super().__getitem__(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list | collections.deque):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


@attrs.define
class Trace:
    """A recorded call: its policy and its steps, which call it was and which turnfsm
    recorded it.

    ``dropped`` counts the steps a bounded trace let go (its oldest); such a trace shows
    the end of a call and cannot be replayed. ``torn_line`` is the number of the last line
    of a file, cut short when its writer stopped mid-step, skipped when it was read.
    """

    policy: TurnPolicy
    steps: MutableSequence[TraceStep] = attrs.field(factory=list)
    dropped: int = 0
    call: CallInfo = attrs.field(factory=CallInfo)
    turnfsm_version: str | None = None
    """The version of turnfsm that recorded the call (``None``: a format 1 trace)."""
    torn_line: int | None = None

    @classmethod
    def bounded(
        cls,
        policy: TurnPolicy,
        max_steps: int,
        *,
        call: CallInfo | None = None,
        turnfsm_version: str | None = None,
    ) -> Trace:
        """A trace that keeps the last ``max_steps`` steps (a ring buffer)."""
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        return cls(
            policy=policy,
            steps=StepRing(maxlen=max_steps),
            call=call or CallInfo(),
            turnfsm_version=turnfsm_version,
        )

    @property
    def max_steps(self) -> int | None:
        """How many steps the trace keeps; ``None`` when it keeps them all."""
        return getattr(self.steps, "maxlen", None)

    def append(self, step: TraceStep) -> None:
        """Add a step; a bounded trace that is full lets its oldest step go."""
        if self.max_steps is not None and len(self.steps) == self.max_steps:
            self.dropped += 1
        self.steps.append(step)

    def __iter__(self) -> Iterator[TraceStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def warnings(self) -> list[str]:
        """What a reader of this trace should know: a last line skipped as torn."""
        if self.torn_line is None:
            return []
        return [
            f"line {self.torn_line} was cut short (its writer stopped mid-step): skipped, "
            "the call's last step is missing"
        ]

    def header(self) -> str:
        """The first line: format and turnfsm versions, call, policy and (when some were)
        dropped steps."""
        return _header_line(self.policy, self.call, self.turnfsm_version, self.dropped)

    def to_jsonl(self) -> str:
        """The trace as JSON lines (header first)."""
        lines = [self.header(), *(step_line(step) for step in self.steps)]
        return "\n".join(lines) + "\n"

    def write(self, path: str | Path) -> None:
        """Write the trace to ``path`` as JSON lines."""
        Path(path).write_text(self.to_jsonl(), encoding="utf-8")

    @classmethod
    def read(cls, path: str | Path, *, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
        """Read a trace written by :meth:`write` or a :class:`TraceWriter`.

        Raises:
            TraceFormatError: naming the first bad line (or the size of the file).
            OSError: the file cannot be opened.
        """
        with open(path, "rb") as stream:
            return cls._parse(_file_lines(stream, max_bytes))

    @classmethod
    def parse(cls, lines: Iterable[str] | IO[str]) -> Trace:
        """Parse JSON lines (each whole: :meth:`read` alone knows a file's last line may be
        torn); blank lines are skipped.

        Raises:
            TraceFormatError: naming the first bad line.
        """
        return cls._parse((line, True) for line in lines)

    @classmethod
    def _parse(cls, lines: Iterable[tuple[str | bytes, bool]]) -> Trace:
        """Parse ``(line, whole)`` pairs; a line that is not ``whole`` (only ever a file's
        last) is skipped as torn when it does not read."""
        trace: Trace | None = None
        states = _STATE_IDS
        version = FORMAT_VERSION
        for number, (line, whole) in enumerate(lines, start=1):
            try:
                text = _text(line)
                if not text.strip():
                    continue
                record = _json(text)
                if trace is None:
                    trace = cls(**_parse_header(record))
                    version = record["turnfsm_trace"]
                else:
                    trace.steps.append(_step_from_dict(record, states, version))
            except (ValueError, TypeError, KeyError, RecursionError) as error:
                if whole:
                    raise TraceFormatError(f"line {number}: {_problem(error)}") from None
                if trace is None:
                    raise TraceFormatError(
                        f"line {number}: cut short before the header's end ({_problem(error)})"
                    ) from None
                trace.torn_line = number
        if trace is None:
            raise TraceFormatError("line 1: empty trace, expected a header line")
        return trace


class TraceSink(Protocol):
    """Where a controller sends each recorded step as it happens (see :class:`TraceWriter`).

    ``start`` is called once, with the policy as the trace shows it (redacted unless text
    is kept) and the call; ``append`` once per step, already redacted. An ``append`` that
    raises makes the controller's step fail as if it never happened.
    """

    def start(self, policy: TurnPolicy, call: CallInfo) -> None: ...

    def append(self, step: TraceStep) -> None: ...


class TraceWriter:
    """A :class:`TraceSink` writing a call's trace to a file as it happens.

    The header is written when the controller starts, then one line per step, flushed:
    the file is a trace :meth:`Trace.read` reads at any moment, a crash loses at most the
    step being written, and memory stays flat however long the call::

        writer = TraceWriter(f"traces/{room_name}.jsonl")
        controller = TurnController(policy, call=CallInfo(call_id=room_name), trace_sink=writer)
        ...  # the call
        writer.close()  # e.g. in the session's "close" handler

    A write that fails (disk full) stops the writer rather than the call: :attr:`error`
    keeps the ``OSError`` and later steps are not written.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.error: OSError | None = None
        self.steps = 0
        self._stream: IO[str] | None = None

    def start(self, policy: TurnPolicy, call: CallInfo) -> None:
        if self._stream is not None or self.steps:
            raise RuntimeError(f"{self.path}: a TraceWriter records one call; open another")
        self._stream = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close)
        self._write(_header_line(policy, call, turnfsm_version(), 0))

    def append(self, step: TraceStep) -> None:
        if self._stream is None:
            if self.error is None and not self.steps:
                raise RuntimeError(f"{self.path}: start() the writer before appending")
            return
        self._write(step_line(step))
        self.steps += 1

    def close(self) -> None:
        """Close the file; idempotent."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write(self, line: str) -> None:
        assert self._stream is not None
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except OSError as error:
            self.error = error
            self.close()


class RedactedError(Exception):
    """An exception as it leaves the process when text is not kept: its type (and, for a
    broken invariant, the invariant's name), never its message, which may quote the call
    (a TTS plugin's error quoting the greeting it was given, an invariant violation
    listing the step's effects). Logged, it reads ``RuntimeError('[redacted]')``."""

    def __init__(self, error: BaseException) -> None:
        self.error_type = type(error).__name__
        """The original exception's class name."""
        self.invariant = error.invariant if isinstance(error, InvariantViolation) else None
        """The invariant a violation names (``"I3"``), otherwise ``None``."""
        super().__init__(f"{self.invariant} {REDACTED}" if self.invariant else REDACTED)

    def __repr__(self) -> str:
        return f"{self.error_type}({str(self)!r})"


_Item = TypeVar("_Item")


@overload
def redact(item: BaseException, *, keep_text: bool = False) -> BaseException: ...


@overload
def redact(item: _Item, *, keep_text: bool = False) -> _Item: ...


def redact(item: Any, *, keep_text: bool = False) -> Any:
    """``item`` as it may leave the process: the one redaction every channel uses (trace
    file and sink, pictures drawn from them, logs, span attributes, lever errors).

    With ``keep_text`` it is ``item`` itself. Otherwise an event's, effect's or policy's
    :data:`~turnfsm.fields.Text` fields (:func:`~turnfsm.fields.text_fields`: transcript
    and policy texts) read ``[redacted]`` (an empty
    text too: nothing about a text shows; a missing one stays ``None``), and an exception
    becomes a :class:`RedactedError`. Anything else holds no text and is returned as is.
    """
    if keep_text:
        return item
    if isinstance(item, BaseException):
        return RedactedError(item)
    names = text_fields(type(item))
    if not names:
        return item
    changes = {name: REDACTED for name in names if getattr(item, name) is not None}
    return _with(item, changes) if changes else item


def _with(item: Any, changes: dict[str, str]) -> Any:
    """``attrs.evolve(item, **changes)`` for the redaction marker. An event or effect is
    copied rather than built again: building one only checks its fields, which it passed
    already, and the marker is a valid text (every step of a call redacts its event and
    effects, and evolving cost more than the rest of a step). Anything else is evolved."""
    if not isinstance(item, ev.Event | fx.Effect):
        return attrs.evolve(item, **changes)
    copy = object.__new__(type(item))
    for field in attrs.fields(type(item)):
        name = field.name
        object.__setattr__(copy, name, changes[name] if name in changes else getattr(item, name))
    return copy


def step_line(step: TraceStep) -> str:
    """One step as a JSON line (without the newline)."""
    return _dumps(_step_to_dict(step))


def _header_line(policy: TurnPolicy, call: CallInfo, version: str | None, dropped: int) -> str:
    header: dict[str, Any] = {
        "turnfsm_trace": FORMAT_VERSION,
        "turnfsm_version": version,
        "call": attrs.asdict(call),
        "policy": policy.to_dict(),
    }
    if dropped:
        header["dropped_steps"] = dropped
    return _dumps(header)


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, allow_nan=False)


def _data(item: ev.Event | fx.Effect) -> dict[str, Any]:
    return {"name": item.name, **attrs.asdict(item)}


def _step_to_dict(step: TraceStep) -> dict[str, Any]:
    return {
        "at": step.at,
        "event": _data(step.event),
        "before": step.before,
        "after": step.after,
        "effects": [_data(effect) for effect in step.effects],
    }


# -- reading untrusted lines ------------------------------------------------------------


def _file_lines(stream: IO[bytes], max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """The stream's lines as ``(bytes, whole)``, each bounded, the whole file bounded; a
    line is whole when its newline was written (only the last may lack it)."""
    total = 0
    number = 0
    while raw := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        total += len(raw)
        whole = raw.endswith(b"\n")
        if len(raw) - whole > MAX_LINE_BYTES:
            raise TraceFormatError(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
        if total > max_bytes:
            raise TraceFormatError(
                f"line {number}: the trace is larger than {max_bytes} bytes "
                "(Trace.read(path, max_bytes=...) reads larger ones)"
            )
        yield raw, whole


def _text(line: str | bytes) -> str:
    """A line as text: bytes are decoded (UTF-8 checked); either is bounded."""
    if isinstance(line, bytes):
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"not UTF-8 text (byte {line[error.start]:#04x} at column {error.start + 1})"
            ) from None
    # a character is at least one byte: only a long line needs counting
    if len(line) > MAX_LINE_BYTES // 4 and (
        len(line.encode("utf-8", "surrogatepass")) - line.endswith("\n") > MAX_LINE_BYTES
    ):
        raise ValueError(f"longer than {MAX_LINE_BYTES} bytes")
    return line


def _json(line: str) -> Any:
    record = json.loads(
        line, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float
    )
    if not isinstance(record, dict):
        raise ValueError("a line must be a JSON object")
    if _SURROGATE_ESCAPE.search(line):  # a pair is text; a lone half is not
        try:
            json.dumps(record, ensure_ascii=False, check_circular=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "a string holds a lone surrogate (\\ud800-\\udfff): not text"
            ) from None
    return record


_SURROGATE_ESCAPE = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")
"""A surrogate, escaped or not (``parse`` takes strings, which may hold one raw)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a trace holds")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"number out of range: {text[:20]}... ({len(text)} digits)")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _problem(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "nested too deeply"
    if isinstance(error, KeyError):
        return f"missing {error}"
    return str(error)


_STATE_IDS = frozenset(STATES)
"""The states a step may name: the ones a call can be in."""


_HEADER_KEYS: dict[int, frozenset[str]] = {
    1: frozenset({"turnfsm_trace", "policy", "dropped_steps"}),
    2: frozenset({"turnfsm_trace", "turnfsm_version", "call", "policy", "dropped_steps"}),
    3: frozenset({"turnfsm_trace", "turnfsm_version", "call", "policy", "dropped_steps"}),
    4: frozenset({"turnfsm_trace", "turnfsm_version", "call", "policy", "dropped_steps"}),
    5: frozenset({"turnfsm_trace", "turnfsm_version", "call", "policy", "dropped_steps"}),
}
"""The keys a header of each format may hold."""


def _parse_header(record: dict[str, Any]) -> dict[str, Any]:
    """The :class:`Trace` fields a header line holds."""
    version = record.get("turnfsm_trace")
    if type(version) is not int or version not in READ_VERSIONS:
        readable = " or ".join(map(str, READ_VERSIONS))
        raise ValueError(f"header: turnfsm_trace must be {readable}, got {version!r}")
    if unknown := sorted(set(record) - _HEADER_KEYS[version]):
        raise ValueError(f"header: unknown keys {unknown}")
    policy = record.get("policy")
    if not isinstance(policy, dict):
        raise ValueError("header: policy must be an object")
    dropped = record.get("dropped_steps", 0)
    if isinstance(dropped, bool) or not isinstance(dropped, int) or dropped < 0:
        raise ValueError(f"header: dropped_steps must be an integer >= 0, got {show(dropped)}")
    # a trace written before greet_on existed greeted on LiveKit's end of turn
    policy = {"greet_on": "end_of_turn", **policy}
    fields: dict[str, Any] = {"policy": TurnPolicy(**policy), "dropped": dropped}
    if version >= 2:
        fields["call"] = _call(record["call"])
        written_by = record["turnfsm_version"]
        if written_by is not None and (
            not isinstance(written_by, str) or len(written_by) > MAX_CALL_TEXT
        ):
            raise ValueError(
                f"header: turnfsm_version must be a string or null, got {show(written_by)}"
            )
        fields["turnfsm_version"] = written_by
    return fields


def _call(data: Any) -> CallInfo:
    if not isinstance(data, dict):
        raise ValueError(f"header: call must be an object, got {show(data)}")
    known = {field.name for field in attrs.fields(CallInfo)}
    if unknown := sorted(set(data) - known):
        raise ValueError(f"header: call has unknown keys {unknown}")
    return CallInfo(**data)


def _build(kinds: dict[str, type], data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be an object, got {show(data)}")
    fields = dict(data)
    name = fields.pop("name", None)
    if not isinstance(name, str) or name not in kinds:
        raise ValueError(f"unknown {what} {show(name)}")
    known = {field.name for field in attrs.fields(kinds[name])}
    if unknown := sorted(set(fields) - known):
        raise ValueError(f"{what} {name!r} has unknown fields {unknown}")
    item = kinds[name](**fields)
    check_fields(item)
    return item


STEP_KEYS = frozenset({"at", "event", "before", "after", "effects"})


def _timer_fired(data: Any) -> Any:
    """A format 1 or 2 timer expiry, ``{"name": "timer_fired", "timer": "idle", ...}``,
    as that timer's own event (format 3); anything else as it is."""
    if not isinstance(data, dict) or data.get("name") != "timer_fired":
        return data
    fields = dict(data)
    timer = fields.pop("timer", None)
    kind = ev.EXPIRY_OF.get(timer) if isinstance(timer, str) else None
    if kind is None:
        raise ValueError(f"event 'timer_fired' names an unknown timer {show(timer)}")
    return {**fields, "name": kind.name}


RETIRED_FIELDS: dict[str, dict[str, int]] = {
    ev.AgentSpeechEnded.name: {"played_text": 3},
    fx.DropUnspokenText.name: {"played_text": 3, "played_seconds": 4},
}
"""The fields an event or effect no longer has, by its name, each with the last format
that wrote it; a trace of that format or an earlier one is read without them.
``played_text`` was a transcript synchronizer's text, which keeps words nobody heard: it
never was the cut (those drops read as unmeasured, ``CallMetrics.unmeasured_drops`` in
turnfsm.tools.metrics); a drop's ``played_seconds`` was read by nobody."""


def _without_retired(data: Any, version: int) -> Any:
    """An event or effect of a ``version`` trace without the fields that format still
    wrote and this one no longer has; anything else as it is."""
    name = data.get("name") if isinstance(data, dict) else None
    retired = RETIRED_FIELDS.get(name) if isinstance(name, str) else None
    if not retired:
        return data
    return {key: value for key, value in data.items() if retired.get(key, 0) < version}


def _step_from_dict(record: dict[str, Any], states: frozenset[str], version: int) -> TraceStep:
    if missing := sorted(STEP_KEYS - set(record)):
        raise ValueError(f"step is missing {missing}")
    if unknown := sorted(set(record) - STEP_KEYS):
        raise ValueError(f"step has unknown keys {unknown}")
    effects = record["effects"]
    if not isinstance(effects, list):
        raise ValueError("effects must be a list")
    for key in ("before", "after"):
        if not isinstance(record[key], str):
            raise ValueError(f"{key} must be a state id string, got {show(record[key])}")
        if record[key] not in states:
            raise ValueError(f"{key}: unknown state {show(record[key])}")
    event_data = record["event"] if version >= 3 else _timer_fired(record["event"])
    event_data = _without_retired(event_data, version)
    effects = [_without_retired(effect, version) for effect in effects]
    event = _build(ev.EVENTS_BY_NAME, event_data, "event")
    at = record["at"]
    if isinstance(at, bool) or not isinstance(at, int | float) or at != event.at:
        raise ValueError(f"at must be the event's time {event.at}, got {show(at)}")
    return TraceStep(
        at=event.at,
        event=event,
        before=record["before"],
        after=record["after"],
        effects=tuple(_build(fx.EFFECTS_BY_NAME, e, "effect") for e in effects),
    )
