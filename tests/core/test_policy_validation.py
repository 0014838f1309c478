"""TurnPolicy: every field validates, cross-field rules hold, defaults follow direction."""

from __future__ import annotations

import json

import attrs
import pytest

from turnfsm import TurnPolicy

GOOD = {"direction": "inbound", "greeting": "Hi, this is Ada."}
"""A valid base; each case below changes one field to a bad value."""

BAD_VALUES: dict[str, list[object]] = {
    "direction": ["sideways", None, 1],
    "first_speaker": ["bot", None],
    "greeting": ["", "   ", 3],
    "greeting_instructions": ["", 3],
    "await_user_timeout": [0, -1.0, "8", True],
    "on_await_user_timeout": ["wait", None],
    "greeting_lock": ["mute", None],
    "greeting_overlap": ["keep", None],
    "greet_on": ["vad", None],
    "spill_over_window": [0, -0.5, None, "0.5", False],
    "model_reply_wait": [0, -2, None, "2", True],
    "response_done_wait": [0, -5, None, "5", False],
    "tool_reply_hold": [0, -3, "3", True, float("inf")],
    "interrupted_text": ["spoken_prefix", None],
    "max_tool_steps": [0, -1, 1.5, True, "3"],
    "tool_cap_fallback": ["", " ", None],
    "mute_input_during_tools": [1, "yes", None],
    "idle_timeout": [0, -3, "5", True],
    "idle_max_reprompts": [-1, 1.0, False],
    "idle_message": ["", None],
    "max_call_duration": [0, -60, "600"],
    "on_answering_machine": ["voicemail", None],
}


def test_every_field_has_bad_value_cases() -> None:
    """A new policy field without a validation case fails here."""
    assert set(BAD_VALUES) == {field.name for field in attrs.fields(TurnPolicy)}


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
