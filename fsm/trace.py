"""Traces: every step of a call as data, written and read as JSON lines.

The first line is a header with the format version and the policy; each further line
is one step ``{"at", "event", "before", "after", "effects"}``. Reading is JSON only
and validated: a malformed line raises :class:`TraceFormatError` with its line number.

Transcript text (what the caller said, what the agent said) is redacted when a step
is recorded unless the controller was asked to keep it; the length stays.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs

from . import effects as fx
from . import events as ev
from .policy import TurnPolicy

FORMAT_VERSION = 1

TEXT_FIELDS: dict[type, tuple[str, ...]] = {
    ev.UserTranscript: ("text",),
    ev.UserTurnCommitted: ("text",),
    ev.AssistantMessageCommitted: ("text",),
    ev.AgentSpeechEnded: ("played_text",),
    fx.DropUnspokenText: ("played_text",),
}
"""Fields holding transcript text, redacted in traces unless kept."""


class TraceFormatError(ValueError):
    """A trace line is not valid; the message names the line and the problem."""


@attrs.frozen
class TraceStep:
    """One step: the event, the state before and after, and the effects in order."""

    at: float
    event: ev.Event
    before: str
    after: str
    effects: tuple[fx.Effect, ...]


@attrs.define
class Trace:
    """A recorded call: its policy and its steps."""

    policy: TurnPolicy
    steps: list[TraceStep] = attrs.field(factory=list)

    def __iter__(self) -> Iterator[TraceStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def to_jsonl(self) -> str:
        """The trace as JSON lines (header first)."""
        header = {"turnfsm_trace": FORMAT_VERSION, "policy": self.policy.to_dict()}
        lines = [json.dumps(header, sort_keys=True)]
        lines.extend(json.dumps(_step_to_dict(step), sort_keys=True) for step in self.steps)
        return "\n".join(lines) + "\n"

    def write(self, path: str | Path) -> None:
        """Write the trace to ``path`` as JSON lines."""
        Path(path).write_text(self.to_jsonl(), encoding="utf-8")

    @classmethod
    def read(cls, path: str | Path) -> Trace:
        """Read a trace written by :meth:`write`.

        Raises:
            TraceFormatError: naming the first bad line.
        """
        with open(path, encoding="utf-8") as stream:
            return cls.parse(stream)

    @classmethod
    def parse(cls, lines: Iterable[str] | IO[str]) -> Trace:
        """Parse JSON lines; blank lines are skipped.

        Raises:
            TraceFormatError: naming the first bad line.
        """
        trace: Trace | None = None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("a line must be a JSON object")
                if trace is None:
                    trace = cls(policy=_parse_header(record))
                else:
                    trace.steps.append(_step_from_dict(record))
            except (ValueError, TypeError, KeyError) as error:
                raise TraceFormatError(f"line {number}: {error}") from None
        if trace is None:
            raise TraceFormatError("line 1: empty trace, expected a header line")
        return trace


def redact(item: Any) -> Any:
    """``item`` with its transcript fields replaced by their length only."""
    names = TEXT_FIELDS.get(type(item))
    if not names:
        return item
    changes = {
        name: f"[redacted {len(value)} chars]"
        for name in names
        if (value := getattr(item, name)) is not None
    }
    return attrs.evolve(item, **changes) if changes else item


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


def _parse_header(record: dict[str, Any]) -> TurnPolicy:
    version = record.get("turnfsm_trace")
    if version != FORMAT_VERSION:
        raise ValueError(f"header: turnfsm_trace must be {FORMAT_VERSION}, got {version!r}")
    policy = record.get("policy")
    if not isinstance(policy, dict):
        raise ValueError("header: policy must be an object")
    return TurnPolicy(**policy)


def _build(kinds: dict[str, type], data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be an object, got {data!r}")
    fields = dict(data)
    name = fields.pop("name", None)
    if name not in kinds:
        raise ValueError(f"unknown {what} {name!r}")
    known = {field.name for field in attrs.fields(kinds[name])}
    if unknown := sorted(set(fields) - known):
        raise ValueError(f"{what} {name!r} has unknown fields {unknown}")
    return kinds[name](**fields)


def _step_from_dict(record: dict[str, Any]) -> TraceStep:
    missing = sorted({"at", "event", "before", "after", "effects"} - set(record))
    if missing:
        raise ValueError(f"step is missing {missing}")
    effects = record["effects"]
    if not isinstance(effects, list):
        raise ValueError("effects must be a list")
    for key in ("before", "after"):
        if not isinstance(record[key], str):
            raise ValueError(f"{key} must be a state id string")
    return TraceStep(
        at=float(record["at"]),
        event=_build(ev.EVENTS_BY_NAME, record["event"], "event"),
        before=record["before"],
        after=record["after"],
        effects=tuple(_build(fx.EFFECTS_BY_NAME, e, "effect") for e in effects),
    )
