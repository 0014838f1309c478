"""TurnPolicy: every field validates, cross-field rules hold, defaults follow direction."""

from __future__ import annotations

import json

import attrs
import pytest

from turnfsm import TurnPolicy
from turnfsm.policy import MAX_COUNT, Count, OneOf, Seconds

GOOD = {"direction": "inbound", "greeting": "Hi, this is Ada."}
"""A valid base; each case below changes one field to a bad value."""

SPECIAL_BAD_VALUES: dict[str, list[object]] = {
    "direction": ["sideways", 1],
    "first_speaker": ["bot"],
    "await_user_timeout": ["8"],
    "on_await_user_timeout": ["wait"],
    "greeting_lock": ["mute"],
    "greeting_overlap": ["keep"],
    "greet_on": ["vad"],
    "spill_over_window": [-0.5, "0.5", False],
    "interrupted_text": ["spoken_prefix"],
    "max_tool_steps": [-1],
    "tool_cap_fallback": [" "],
    "tool_reply_hold": [-3, "3"],
    "idle_timeout": [-3],
    "idle_max_reprompts": [1.0, False],
    "max_call_duration": [-60, "600"],
    "on_answering_machine": ["voicemail"],
    "model_reply_wait": [-2, "2"],
    "response_done_wait": [-5, False],
}
"""Cases written out, beside those every field's validator gives (:func:`bad_values`)."""


def bad_values(field: attrs.Attribute) -> list[object]:
    """Values ``field``'s validator must refuse, by its kind."""
    check, default = field.validator, field.default
    if isinstance(check, OneOf):
        return ["none_of_them", None]
    if isinstance(check, Seconds):
        return [0, -1.0, "5", True, float("inf"), *[None] * (not check.optional)]
    if isinstance(check, Count):
        return [check.minimum - 1, MAX_COUNT + 1, 1.5, True, "3"]
    if isinstance(default, bool):
        return [1, "yes", None]
    if "Text" in str(field.type):
        return ["", "   ", 3, *[None] * (default is not None)]
    raise AssertionError(f"{field.name}: no bad values known for its validator {check!r}")


BAD_VALUES: dict[str, list[object]] = {
    field.name: [*bad_values(field), *SPECIAL_BAD_VALUES.get(field.name, [])]
    for field in attrs.fields(TurnPolicy)
}
"""Every field's bad values: a new field is checked as soon as it is declared."""


@pytest.mark.parametrize(
    ("field", "value"),
    [(field, value) for field, values in BAD_VALUES.items() for value in values],
)
def test_bad_value_raises_naming_the_field(field: str, value: object) -> None:
    options = {**GOOD, field: value}
    if field == "greeting_instructions":
        options["greeting"] = None  # keep the cross-field rule out of the way
    with pytest.raises(ValueError, match=rf"^{field} must be") as error:
        TurnPolicy(**options)
    assert repr(value) in str(error.value)


def test_greeting_and_instructions_are_exclusive() -> None:
    with pytest.raises(ValueError, match="greeting and greeting_instructions are exclusive"):
        TurnPolicy(greeting="Hi", greeting_instructions="Greet warmly")


@pytest.mark.parametrize(
    "options",
    [
        {"direction": "outbound", "first_speaker": "user"},
        {"direction": "outbound", "first_speaker": "agent"},
        {"direction": "outbound"},
    ],
)
def test_an_outbound_call_needs_a_greeting(options: dict[str, object]) -> None:
    # the agent's own on_enter runs while an outbound call rings: it cannot greet
    with pytest.raises(ValueError, match="greeting_instructions is required for an outbound"):
        TurnPolicy(**options)


def test_inbound_user_first_needs_no_greeting() -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    assert not policy.has_greeting
    assert not policy.greets_in_own_words


@pytest.mark.parametrize("options", [{"first_speaker": "agent"}, {}])
def test_an_inbound_agent_without_a_greeting_greets_in_its_own_words(
    options: dict[str, object],
) -> None:
    policy = TurnPolicy(direction="inbound", **options)  # type: ignore[arg-type]
    assert not policy.has_greeting
    assert policy.greets_in_own_words
    assert not TurnPolicy(greeting="Hi.").greets_in_own_words


def test_defaults() -> None:
    outbound = TurnPolicy(direction="outbound", greeting="Hi")
    assert outbound.first_speaker == "user"
    inbound = TurnPolicy(greeting_instructions="Greet the caller")
    assert inbound.direction == "inbound"
    assert inbound.first_speaker == "agent"
    assert inbound.greeting_lock == "keep_listening"
    assert inbound.greeting_overlap == "answer_whole"
    assert inbound.interrupted_text == "spoken"
    assert inbound.max_tool_steps == 3
    assert inbound.idle_timeout is None
    assert inbound.max_call_duration is None
    assert inbound.on_answering_machine == "hang_up"
    assert inbound.has_greeting
    assert not inbound.mutes_greeting
    assert TurnPolicy(greeting="Hi", greeting_lock="mute_input").mutes_greeting


def test_explicit_first_speaker_overrides_the_direction_default() -> None:
    assert TurnPolicy(
        direction="outbound", first_speaker="agent", greeting="Hi"
    ).first_speaker == ("agent")


@pytest.mark.parametrize(
    "policy",
    [
        TurnPolicy(direction="inbound", first_speaker="user"),
        TurnPolicy(
            direction="outbound",
            greeting_instructions="Introduce yourself",
            greeting_lock="mute_input",
            greeting_overlap="drop",
            spill_over_window=0.8,
            interrupted_text="drop",
            max_tool_steps=1,
            mute_input_during_tools=True,
            idle_timeout=7.5,
            idle_max_reprompts=0,
            max_call_duration=600,
            on_answering_machine="continue",
            on_await_user_timeout="hang_up",
        ),
    ],
)
def test_to_dict_round_trips_through_json(policy: TurnPolicy) -> None:
    data = policy.to_dict()
    assert set(data) == {field.name for field in attrs.fields(TurnPolicy)}
    assert TurnPolicy(**data) == policy
    assert TurnPolicy(**json.loads(json.dumps(data))) == policy


def test_policy_is_frozen() -> None:
    policy = TurnPolicy(greeting="Hi")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.greeting = "Bye"  # type: ignore[misc]
