"""Conformance of OpenAI Realtime events to the ``openai`` package's typed models.

Every server event `RealtimeTestServer` sends is validated against
``openai.types.realtime.RealtimeServerEvent`` and every client event it receives against
``RealtimeClientEvent``: required fields, types and literal values, plus fields the model
does not declare (the models accept extra fields, the real service does not: it answers an
unknown client field with ``unknown_parameter``).

A malformed client event is also answered the way the real service answers it
(`client_event_error`); the codes and messages follow errors the service was seen to send:
``Unknown parameter: 'session.tools[0].meta'.`` (``unknown_parameter``), ``Missing required
parameter: 'item.content[0].text'.`` (``missing_required_parameter``), ``Invalid value:
'transcription_session.update'.`` for an event type it does not know (``invalid_value``).
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
from openai.types.realtime.realtime_client_event import RealtimeClientEvent
from openai.types.realtime.realtime_server_event import RealtimeServerEvent

__all__ = [
    "ConformanceError",
    "Problem",
    "Violation",
    "client_event_error",
    "client_event_problems",
    "server_event_problems",
]

Side = Literal["client", "server"]

# Fields the real service sends in a session object that the typed request model lacks
# (``session.created`` carries the session's id, ``object`` and expiry).
_SERVICE_SESSION_FIELDS = frozenset({"id", "object", "expires_at"})


def _models_by_type(union_alias: object) -> dict[str, type[pydantic.BaseModel]]:
    """Maps each event ``type`` literal of a discriminated union to its model."""
    (union, *_) = typing.get_args(union_alias)
    models: dict[str, type[pydantic.BaseModel]] = {}
    for model in typing.get_args(union):
        for literal in typing.get_args(model.model_fields["type"].annotation):
            models[literal] = model
    return models


_SERVER_MODELS = _models_by_type(RealtimeServerEvent)
_CLIENT_MODELS = _models_by_type(RealtimeClientEvent)


@dataclass(frozen=True)
class Problem:
    """One way an event departs from its typed model.

    Attributes:
        kind: ``missing``, ``unknown`` (a field the model does not declare), ``type``
            (an unknown event type) or ``invalid`` (a wrong type or value).
        param: Where, in the service's notation, e.g. ``session.tools[0].name``.
        detail: What the model says is wrong.
        value: The offending value (for ``invalid`` and ``type``).
    """

    kind: Literal["missing", "unknown", "type", "invalid"]
    param: str
    detail: str
    value: Any = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.param or '<event>'}: {self.kind} ({self.detail})"


@dataclass(frozen=True)
class Violation:
    """An event on the wire that does not conform.

    Attributes:
        side: Who sent it: ``client`` (the plugin or turnfsm) or ``server``.
        type: The event's ``type``.
        problems: What is wrong with it.
        payload: The event as sent.
    """

    side: Side
    type: str
    problems: tuple[Problem, ...]
    payload: Mapping[str, Any]

    def __str__(self) -> str:
        return f"{self.side} {self.type!r}: " + "; ".join(map(str, self.problems))


class ConformanceError(AssertionError):
    """Events on the wire did not conform to the ``openai`` package's models."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__(
            f"{len(violations)} non-conforming realtime event(s):\n"
            + "\n".join(f"  {violation}" for violation in violations)
        )


def _param(location: tuple[int | str, ...]) -> str:
    """``('session', 'tools', 0, 'name')`` -> ``session.tools[0].name``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _unknown_fields(
    value: object, location: tuple[int | str, ...], side: Side
) -> Iterator[tuple[int | str, ...]]:
    """Locations of fields a validated model holds but does not declare."""
    if isinstance(value, pydantic.BaseModel):
        allowed = _SERVICE_SESSION_FIELDS if side == "server" and location == ("session",) else ()
        for name in value.model_extra or {}:
            if name not in allowed:
                yield (*location, name)
        for name in type(value).model_fields:
            yield from _unknown_fields(getattr(value, name), (*location, name), side)
    elif isinstance(value, list | tuple):
        for index, element in enumerate(value):
            yield from _unknown_fields(element, (*location, index), side)
    elif isinstance(value, dict):
        for key, element in value.items():
            yield from _unknown_fields(element, (*location, key), side)


def _problems(
    payload: Mapping[str, Any], models: Mapping[str, type[pydantic.BaseModel]], side: Side
) -> tuple[Problem, ...]:
    event_type = payload.get("type")
    model = models.get(event_type) if isinstance(event_type, str) else None
    if model is None:
        return (Problem("type", "type", "not an event type of this side", event_type),)
    try:
        validated = model.model_validate(dict(payload))
    except pydantic.ValidationError as error:
        return _validation_problems(error)
    return tuple(
        Problem("unknown", _param(location), "not declared by the model")
        for location in _unknown_fields(validated, (), side)
    )


def _is_member(part: int | str) -> bool:
    """Whether a location part names a union member pydantic tried (``ServerVad``,
    ``function-after[...]``, ``literal['x']``) rather than a field."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part)


def _validation_problems(error: pydantic.ValidationError) -> tuple[Problem, ...]:
    """The problems of the union members the event meant.

    A union reports every member it tried; a member whose ``type`` literal did not match
    is not the one the client meant, so its errors are dropped while another remains.
    """
    by_member: dict[tuple[str, ...], list[Problem]] = {}
    mismatched: set[tuple[str, ...]] = set()
    for detail in error.errors():
        members = tuple(str(part) for part in detail["loc"] if _is_member(part))
        location = tuple(part for part in detail["loc"] if not _is_member(part))
        kind: Literal["missing", "invalid"] = (
            "missing" if detail["type"] == "missing" else "invalid"
        )
        if detail["type"] == "literal_error" and location[-1:] == ("type",):
            mismatched.add(members)
        problem = Problem(kind, _param(location), detail["msg"], detail.get("input"))
        by_member.setdefault(members, []).append(problem)
    meant = [members for members in by_member if members not in mismatched] or list(by_member)
    return tuple(dict.fromkeys(p for members in meant for p in by_member[members]))


def server_event_problems(payload: Mapping[str, Any]) -> tuple[Problem, ...]:
    """How a server event departs from ``RealtimeServerEvent`` (empty if it conforms)."""
    return _problems(payload, _SERVER_MODELS, "server")


def client_event_problems(payload: Mapping[str, Any]) -> tuple[Problem, ...]:
    """How a client event departs from ``RealtimeClientEvent`` (empty if it conforms)."""
    return _problems(payload, _CLIENT_MODELS, "client")


def _supported(values: list[str]) -> str:
    quoted = [f"'{value}'" for value in values]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def client_event_error(
    payload: Mapping[str, Any], problems: tuple[Problem, ...]
) -> dict[str, Any]:
    """The ``error`` object the real service answers a malformed client event with.

    Args:
        payload: The client event.
        problems: Its problems (`client_event_problems`), at least one.

    Returns:
        ``{"type": "invalid_request_error", "code", "message", "param", "event_id"}`` for
        the first problem. The service names the client's ``event_id`` for an unknown
        parameter and leaves it null for the other rejections.
    """
    problem = problems[0]
    event_id = payload.get("event_id")
    if problem.kind == "type":
        code = "invalid_value"
        message = (
            f"Invalid value: '{problem.value}'. Supported values are: "
            f"{_supported(sorted(_CLIENT_MODELS))}."
        )
        event_id = None
    elif problem.kind == "unknown":
        code, message = "unknown_parameter", f"Unknown parameter: '{problem.param}'."
    elif problem.kind == "missing":
        code, message = (
            "missing_required_parameter",
            (f"Missing required parameter: '{problem.param}'."),
        )
        event_id = None
    else:
        code, message = "invalid_value", f"Invalid value for '{problem.param}': {problem.detail}."
        event_id = None
    return {
        "type": "invalid_request_error",
        "code": code,
        "message": message,
        "param": problem.param,
        "event_id": event_id,
    }
