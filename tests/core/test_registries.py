"""Every registry is derived from one declaration, and covers what the chart uses."""

from __future__ import annotations

import re
from typing import Literal, get_args, get_origin, get_type_hints

import attrs
import pytest
from statemachine.callbacks import CallbackSpec

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.events import EVENT_TYPES, REALTIME_EVENTS, TIMER_EVENTS, SessionError
from turnfsm.fields import TEXT_MARK, string_kinds, text_fields
from turnfsm.machine import TIMERS, TurnMachine, leaf_states, leaf_transitions
from turnfsm.rules import POLICY_GUARDS, TurnRules, guards_of
from turnfsm.testing import alphabet_of, event_alphabet, pipeline_samples, realtime_samples


def chart_guards() -> set[str]:
    """Every guard name the chart uses, ``unless`` ones included."""
    names: set[str] = set()
    for state in leaf_states(TurnMachine):
        for transition in leaf_transitions(state):
            specs: list[CallbackSpec] = [s for s in transition.cond if not s.is_convention]
            names |= {str(spec).removeprefix("!") for spec in specs}
    return names


def test_every_guard_of_the_chart_declares_its_kind() -> None:
    undeclared = chart_guards() - set(guards_of())
    assert not undeclared, f"guards without @guard(kind): {sorted(undeclared)}"


def test_each_timer_has_one_expiry_event_one_policy_field_and_a_state() -> None:
    assert fx.TIMER_NAMES == get_args(fx.TimerName)
    assert sorted(kind.timer for kind in TIMER_EVENTS) == sorted(fx.TIMER_NAMES)
    assert set(TIMERS) == set(fx.TIMER_NAMES)  # each declared by a state of the chart
    fields = {field.name for field in attrs.fields(TurnPolicy)}
    assert {timer.seconds for timer in TIMERS.values()} <= fields


@pytest.mark.parametrize("guard", POLICY_GUARDS)
def test_policy_guards_read_the_policy_only(guard: str) -> None:
    """A policy guard gives the same answer whatever the call did (diagrams prune by it)."""
    policy = TurnPolicy(direction="outbound", greeting="Hi")
    fresh, busy = TurnRules(policy=policy), TurnRules(policy=policy)
    busy.context.tool_rounds = 3
    busy.context.reprompts = 5
    assert getattr(fresh, guard)() == getattr(busy, guard)()


def test_policy_choices_are_validated_from_their_literal_types() -> None:
    hints = get_type_hints(TurnPolicy)
    choices = {name: get_args(hint) for name, hint in hints.items() if get_origin(hint) is Literal}
    assert len(choices) == 8  # direction, first_speaker and the six other choices
    for name, values in choices.items():
        for value in values:
            TurnPolicy(greeting="Hi", **{name: value})  # every choice of the type is accepted
        with pytest.raises(ValueError, match=re.escape(f"{name} must be one of {values}")):
            TurnPolicy(greeting="Hi", **{name: "nonsense"})


@pytest.mark.parametrize(
    "cls",
    [*EVENT_TYPES, *fx.EFFECT_TYPES, TurnPolicy],
    ids=lambda cls: cls.__name__,
)
def test_every_string_field_says_whether_it_holds_someones_words(cls: type) -> None:
    """A string field is ``Text`` (redacted wherever it leaves the process) or ``Label``
    (an id, a name, a reason): a bare ``str`` would be neither, and a new transcript field
    forgotten in a list would leak (issue 21, point 5)."""
    kinds = string_kinds(cls)
    bare = [name for name, kind in kinds.items() if kind is None]
    assert not bare, f"{cls.__name__}: mark these Text or Label: {bare}"
    assert text_fields(cls) == tuple(n for n, kind in kinds.items() if kind == TEXT_MARK)


def test_the_text_fields_are_the_words_people_say() -> None:
    texts = {cls.__name__: text_fields(cls) for cls in (*EVENT_TYPES, *fx.EFFECT_TYPES)}
    assert {name: fields for name, fields in texts.items() if fields} == {
        "UserTranscript": ("text",),
        "UserTurnCommitted": ("text",),
        "AssistantMessageCommitted": ("text",),
        "StartGreeting": ("text", "instructions", "first_words"),
        "FinalReplyWithoutTools": ("fallback_text",),
        "Say": ("text", "first_words"),
    }
    assert text_fields(TurnPolicy) == (
        "greeting",
        "greeting_instructions",
        "tool_cap_fallback",
        "idle_message",
    )


def test_every_registered_event_is_explored_or_says_why_not() -> None:
    """The explorer's alphabets are read from the event registry: a type with neither
    samples nor a reason stops the exploration (issue 21, point 5)."""
    for samples in (pipeline_samples(), realtime_samples()):
        assert set(samples) == set(EVENT_TYPES)
        assert all(samples[kind] for kind in EVENT_TYPES)  # samples, or a reason
    # nor the expiries of the realtime waits' timers: they run only with a realtime model
    waits = {kind for kind in TIMER_EVENTS if kind.timer in fx.REALTIME_TIMERS}
    pipeline = set(EVENT_TYPES) - set(REALTIME_EVENTS) - waits
    assert {type(event) for event in event_alphabet()} == pipeline
    without_errors = {k: v for k, v in pipeline_samples().items() if k is not SessionError}
    with pytest.raises(KeyError, match="SessionError"):
        alphabet_of(without_errors)


def _kinds(base: type) -> set[type]:
    """Every class under ``base`` declared beside it with a name of its own (an event or
    effect kind of turnfsm's; an extension's own kinds are declared elsewhere)."""
    found = set()
    for kind in base.__subclasses__():
        if "name" in vars(kind) and kind.__module__ == base.__module__:
            found.add(kind)
        found |= _kinds(kind)
    return found


def test_every_event_and_effect_kind_is_registered() -> None:
    """An event or effect missing from its registry would be handled and traced, then
    refused when its trace is read ("unknown event"), and never explored."""
    assert _kinds(ev.Event) == set(EVENT_TYPES)
    assert _kinds(fx.Effect) == set(fx.EFFECT_TYPES)
