"""Field checks at the door: every value must be what its annotation says.

Events, effects read from a trace and a restored context are attrs classes whose
annotations use a small vocabulary; :func:`check_fields` holds an instance to it and
raises naming the class and the field. ``TypeError`` means the wrong kind of value,
``ValueError`` a value of the right kind out of range.

======================  ===============================================================
annotation              accepted values
======================  ===============================================================
``float``               a finite number >= 0 (every float in turnfsm data is seconds)
``int``                 an integer >= 0 (a count), never a bool
``bool``                ``True`` or ``False`` only (``"no"`` is not false)
``str``                 a string (text: no lone surrogate, which no file can hold)
``Text`` / ``Label``    a ``str``, as above; see below
``Literal[...]``        one of the listed values
``frozenset[X]``        a frozenset of ``X``
``X | None``            ``None`` or ``X``
======================  ===============================================================

Every string field of an event, an effect or the policy says what it holds: ``Text``,
words a person says or may hear (a transcript, the greeting), which traces, logs, spans
and metrics redact unless asked to keep them (:func:`text_fields`); or ``Label``, a
string the machine, LiveKit or the app makes (an id, a timer's name, an end reason, an
error message), never redacted. The tests refuse a bare ``str`` there, so a new field
cannot leak its text by being forgotten in a list.

>>> import attrs
>>> @attrs.frozen
... class Ping:
...     at: float
...     speech_id: str
>>> check_fields(Ping(at=1.0, speech_id="s1"))
>>> check_fields(Ping(at=float("nan"), speech_id="s1"))
Traceback (most recent call last):
...
ValueError: Ping.at must be finite, got nan
>>> check_fields(Ping(at=1.0, speech_id=["s1"]))
Traceback (most recent call last):
...
TypeError: Ping.speech_id must be a string, got ['s1'] (list)
"""

from __future__ import annotations

import math
import re
import sys
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

import attrs

TEXT_MARK = "text"
LABEL_MARK = "label"

Text = Annotated[str, TEXT_MARK]
"""Words a person says or may hear: redacted wherever a trace or telemetry leaves the
process, unless the text is asked to be kept."""

Label = Annotated[str, LABEL_MARK]
"""A string the machine, LiveKit or the app makes (an id, a name, a reason): no one's
words, never redacted."""

Check = Callable[[object], str | None]
"""Returns ``None`` when the value is accepted, else ``"must be ..."``; a message starting
``"!"`` is a value out of range (``ValueError``), any other a wrong kind (``TypeError``)."""

_CHECKS: dict[type, tuple[tuple[str, Check], ...]] = {}


def check_fields(instance: object) -> None:
    """Raise on the first field of the attrs ``instance`` that its annotation refuses.

    Raises:
        TypeError: a value of the wrong kind, e.g. ``text=42`` or ``interrupted="no"``.
        ValueError: a value of the right kind out of range, e.g. ``at=nan``.
    """
    cls = type(instance)
    checks = _CHECKS.get(cls)
    if checks is None:
        checks = _CHECKS[cls] = _compile(cls)
    for name, check in checks:
        value = getattr(instance, name)
        problem = check(value)
        if problem is not None:
            raise field_error(cls.__name__, name, problem, value)


def field_error(owner: str, name: str, problem: str, value: object) -> TypeError | ValueError:
    """The error for ``owner.name``: ``problem`` as :data:`Check` returns it."""
    out_of_range = problem.startswith("!")
    message = f"{owner}.{name} {problem.lstrip('!')}, got {show(value)}"
    return ValueError(message) if out_of_range else TypeError(message)


def show(value: object, limit: int = 60) -> str:
    """A short, printable ``repr`` of ``value`` (with its type when it is no string)."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, str | int | float) or value is None:
        return text
    return f"{text} ({type(value).__name__})"


def string_kinds(cls: type) -> dict[str, str | None]:
    """Each string field of the attrs class ``cls`` (``str``, or ``str | None``): its
    mark (:data:`TEXT_MARK`, :data:`LABEL_MARK`), or ``None`` when it is a bare ``str``."""
    hints = typing.get_type_hints(cls, globalns=_namespace(cls), include_extras=True)
    kinds: dict[str, str | None] = {}
    for field in attrs.fields(cls):
        hint = hints.get(field.name)
        options = (
            typing.get_args(hint)
            if typing.get_origin(hint) in (typing.Union, types.UnionType)
            else (hint,)
        )
        for option in options:
            if option is str:
                kinds[field.name] = None
            elif typing.get_origin(option) is Annotated and typing.get_args(option)[0] is str:
                kinds[field.name] = typing.get_args(option)[1]
    return kinds


def text_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that hold :data:`Text` (none for a class that is not attrs).

    >>> from turnfsm.events import UserTurnCommitted
    >>> text_fields(UserTurnCommitted)
    ('text',)
    """
    found = _TEXT_FIELDS.get(cls)
    if found is None:
        kinds = string_kinds(cls) if attrs.has(cls) else {}
        found = _TEXT_FIELDS[cls] = tuple(n for n, kind in kinds.items() if kind == TEXT_MARK)
    return found


_TEXT_FIELDS: dict[type, tuple[str, ...]] = {}


def _compile(cls: type) -> tuple[tuple[str, Check], ...]:
    hints = typing.get_type_hints(cls, globalns=_namespace(cls))
    return tuple(
        (field.name, _check_for(hints[field.name]))
        for field in attrs.fields(cls)
        if field.name in hints
    )


def _namespace(cls: type) -> dict[str, Any]:
    """The module of ``cls`` plus the vocabulary modules, for names imported only when
    type checking (``TimerName``, ``Effect``...)."""
    from . import effects, events

    return {**vars(effects), **vars(events), **vars(sys.modules[cls.__module__])}


def _check_for(annotation: Any) -> Check:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [_check_for(arg) for arg in args if arg is not type(None)]
        allows_none = type(None) in args
        return _union(options, allows_none)
    if origin is Literal:
        return _one_of(args)
    if origin is frozenset:
        return _set_of(_check_for(args[0]) if args else _any)
    return _SIMPLE.get(annotation, _instance_of(annotation))


def _union(options: list[Check], allows_none: bool) -> Check:
    def check(value: object) -> str | None:
        if value is None and allows_none:
            return None
        problems = [option(value) for option in options]
        if None in problems:
            return None
        problem = problems[0] or "must be set"
        if allows_none:
            problem = f"{problem} or None"
        return problem

    return check


def _one_of(allowed: tuple[Any, ...]) -> Check:
    def check(value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, str | int):
            return f"must be one of {allowed}"
        return None if value in allowed else f"!must be one of {allowed}"

    return check


def _set_of(item: Check) -> Check:
    def check(value: object) -> str | None:
        if not isinstance(value, frozenset):
            return "must be a frozenset"
        for element in value:
            if (problem := item(element)) is not None:
                return f"must be a frozenset whose items each {problem.lstrip('!')}"
        return None

    return check


def _seconds(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if not math.isfinite(value):
        return "!must be finite"
    return None if value >= 0 else "!must be >= 0"


def _count(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be an integer"
    return None if value >= 0 else "!must be >= 0"


def _flag(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be True or False"


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if lone_surrogate(value) is not None:
        return "!must be text: a lone surrogate (\\ud800-\\udfff) cannot be written to a trace"
    return None


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds half a surrogate pair (no UTF-8 file can hold one), if it does."""
    if text.isascii():
        return None
    match = _SURROGATE.search(text)
    return None if match is None else match.start()


_SURROGATE = re.compile("[\ud800-\udfff]")


def _any(value: object) -> str | None:
    return None


def _instance_of(kind: Any) -> Check:
    if not isinstance(kind, type):
        return _any  # an annotation outside the vocabulary: its own validators decide

    def check(value: object) -> str | None:
        return None if isinstance(value, kind) else f"must be a {kind.__name__}"

    return check


_SIMPLE: dict[Any, Check] = {float: _seconds, int: _count, bool: _flag, str: _text}
