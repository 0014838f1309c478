"""Issue 22: ``restore()`` refuses a state and context no call can reach.

It took any pair whose fields were each of the right kind: 1,367 of 1,367 sampled pairs
no call reaches were accepted, one of them cancelling the first tool round of the next
user turn (``capped`` without a round run). Now the context rules
(:mod:`turnfsm.context_rules`) refuse them, checked both ways against the chart, through
the explorer:

* every pair the explorer reaches is accepted (it checks each as ``restore()`` would, so
  every exploration test checks it too);
* of random pairs whose fields are each valid, every one accepted is one the explorer
  reaches there, field by field (the explorer's two speech ids cannot reach every
  combination of fields a call can).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

import attrs
import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.context import TurnContext
from turnfsm.context_rules import MODEL_ANSWERS, SCOPED, reachable_states
from turnfsm.machine import (
    LEAF_STATES,
    MODEL_STATES,
    REGION_STATES,
    public_state,
    states_beside,
)
from turnfsm.testing import INTERRUPTION_SETTINGS, explore

POLICY = TurnPolicy(
    greeting="Hi", greeting_lock="mute_input", mute_input_during_tools=True, max_tool_steps=1
)
"""An inbound call whose greeting and tool steps mute the caller (its exploration takes
~20 s; every other policy is explored, and each reached pair checked, elsewhere)."""
SAMPLES = 20_000
IDS = ("s1", "s2", "u1")


def abstract(context: TurnContext) -> dict[str, Hashable]:
    """Each field as the explorer tells it apart whatever the speech ids: flags and
    counts as they are, an id or a time by whether it is set, a set of speeches by
    whether it is empty."""
    values: dict[str, Hashable] = {}
    for field in attrs.fields(TurnContext):
        value = getattr(context, field.name)
        if isinstance(value, frozenset):
            value = bool(value)
        elif isinstance(value, str | float):
            value = "set"
        values[field.name] = value
    return values


@pytest.fixture(scope="module")
def reached() -> dict[tuple[str, ...], dict[str, set[Hashable]]]:
    """For each configuration the explorer reaches, each field's values there."""
    found: dict[tuple[str, ...], dict[str, set[Hashable]]] = {}

    def note(configuration: tuple[str, ...], context: TurnContext) -> None:
        values = found.setdefault(configuration, {})
        for name, value in abstract(context).items():
            values.setdefault(name, set()).add(value)

    explore(POLICY, reached=note)
    return found


def random_pair(rng: random.Random, policy: TurnPolicy) -> tuple[tuple[str, ...], TurnContext]:
    """A state of the chart and a context whose fields are each valid on their own, and
    consistent with each other as far as the field checks go (ids of active speeches)."""
    state = rng.choice(LEAF_STATES)
    # a pipeline's call, as the explorer explores this policy: no realtime model linked
    # (its region's other states, and what such a model answers on its own, are a
    # realtime call's, explored elsewhere)
    realtime = {leaf for leaf in MODEL_STATES if leaf != "model_unlinked"} | MODEL_ANSWERS
    beside = tuple(
        rng.choice(options)
        for states in REGION_STATES.values()
        if (
            options := [
                leaf for leaf in states if leaf in states_beside()[state] and leaf not in realtime
            ]
        )
    )
    active = frozenset(rng.sample(IDS[:2], rng.randint(0, 2)))

    def an_active_id() -> str | None:
        return rng.choice(sorted(active)) if active and rng.random() < 0.3 else None

    def maybe(value: object) -> object:
        return value if rng.random() < 0.1 else None

    context = TurnContext(
        first_words_item=maybe("u1"),  # type: ignore[arg-type]
        greeting_speech_id=an_active_id(),
        active_speeches=active,
        dropped_speeches=frozenset(s for s in active if rng.random() < 0.1),
        tool_rounds=rng.randint(0, policy.max_tool_steps),
        tool_speech_id=an_active_id(),
        final_speech_id=an_active_id(),
        final_after_speech=an_active_id(),
        reprompts=rng.randint(0, policy.idle_max_reprompts if policy.idle_timeout else 0),
        # a fact of the session, the same in every state: the one the explorer is told
        min_words=INTERRUPTION_SETTINGS.min_words,
    )
    return (state, *beside), context


def test_every_pair_restore_accepts_holds_values_calls_hold_there(
    reached: dict[tuple[str, ...], dict[str, set[Hashable]]], summary_line: object
) -> None:
    """Each field of an accepted pair has a value some call has in that configuration
    (field by field: the explorer's two speech ids cannot reach every combination a call
    can). Before the rules, most random pairs held one no call has."""
    rng = random.Random(22)
    accepted = 0
    controller = TurnController(POLICY, record=False)
    for _ in range(SAMPLES):
        configuration, context = random_pair(rng, POLICY)
        try:
            controller.restore(configuration, context)
        except ValueError:
            continue
        accepted += 1
        assert configuration in reached, configuration
        if configuration == ("ended",):
            continue  # the explorer keeps one context of a call that ended: nothing follows
        unheld = {
            name: value
            for name, value in abstract(context).items()
            if value not in reached[configuration][name]
        }
        assert unheld == {}, (configuration, unheld)
    assert accepted > 20  # the sample holds real pairs too
    summary_line(  # type: ignore[operator]
        f"restore: {SAMPLES - accepted} of {SAMPLES} random pairs refused; the {accepted} "
        f"accepted hold, field by field, values calls hold there ({len(reached)} "
        "configurations explored)"
    )


def test_a_cap_without_a_round_is_refused() -> None:
    """The issue's pair: capped with no round run, in a reply's speech; the next user
    turn's first tool round was cancelled."""
    policy = TurnPolicy(direction="outbound", greeting="Hi", max_call_duration=60.0)
    context = TurnContext(active_speeches=frozenset({"s1"}))
    controller = TurnController(policy)
    with pytest.raises(ValueError, match=r"^'final_reply_asked' follows the cap: tool_rounds"):
        controller.restore(("speaking", "final_reply_asked"), context)
    assert controller.state == "ringing"
    controller.restore("speaking", context)
    effects = controller.handle(ev.ToolStepStarted(at=1.0, speech_id="s1"))
    assert not any(isinstance(effect, fx.CancelToolReply) for effect in effects)


@pytest.mark.parametrize(
    ("policy", "state", "message"),
    [
        (TurnPolicy(greeting="Hi"), "ringing", "no call under this policy is in 'ringing'"),
        (TurnPolicy(first_speaker="user"), "greeting_requested", "is in 'greeting'"),
        (TurnPolicy(greeting="Hi"), "awaiting_user", "is in 'awaiting_user'"),
        # only an agent that greets in its own words waits for its first speech
        (TurnPolicy(greeting="Hi"), "awaiting_agent", "is in 'awaiting_agent'"),
        (TurnPolicy(first_speaker="user"), "awaiting_agent", "is in 'awaiting_agent'"),
    ],
)
def test_a_state_the_policy_never_reaches_is_refused(
    policy: TurnPolicy, state: str, message: str
) -> None:
    assert public_state(state) not in reachable_states(policy)
    with pytest.raises(ValueError, match=message):
        TurnController(policy).restore(state, TurnContext())


def test_an_own_words_call_is_restored_where_it_waits_for_the_agent() -> None:
    controller = TurnController(TurnPolicy())  # inbound, greets in its own words
    controller.restore("awaiting_agent", TurnContext())
    effects = controller.handle(
        ev.AgentSpeechCreated(at=1.0, speech_id="s1", source="reply", from_agent_code=True)
    )
    assert controller.state == "greeting"
    assert fx.LockSpeech(speech_id="s1") in effects


def test_the_rules_name_real_fields() -> None:
    assert set(SCOPED) <= {field.name for field in attrs.fields(TurnContext)}
