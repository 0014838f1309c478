"""Every (state, event) pair is decided: a declared transition (of the state, or of the
caller's voice beside a live state) or a reasoned ``IGNORED`` entry, and handling it never
raises, whatever the configuration and a plausible context."""

from __future__ import annotations

import functools

import attrs
import pytest

from turnfsm import TurnController, TurnMachine, TurnPolicy
from turnfsm import effects as fx
from turnfsm.context import TurnContext
from turnfsm.context_rules import OVERLAP_PHASES, reachable_states, regions_possible
from turnfsm.controller import handled_events
from turnfsm.events import EVENT_TYPES, EVENTS_BY_NAME
from turnfsm.machine import (
    IGNORED,
    LEAF_STATES,
    LIVE_STATES,
    MODEL_STATES,
    REGION_STATES,
    STATES,
    VOICE_STATES,
    configurations,
    declared_moves,
    leaf_states,
    public_state,
    states_beside,
)
from turnfsm.rules import input_muted
from turnfsm.testing import event_alphabet, fresh_context

EVENT_NAMES = sorted(cls.name for cls in EVENT_TYPES)


def test_machine_events_are_event_types() -> None:
    machine_events = {event for _, event, _ in declared_moves()}
    assert machine_events <= set(EVENTS_BY_NAME)
    # an event no state handles (one traced only) says why in IGNORED, in every state:
    # the pair test below holds it to that, so it is not listed here a second time
    assert len(EVENTS_BY_NAME) == len(EVENT_TYPES)  # names are unique


def test_states_are_the_documented_ones() -> None:
    assert list(STATES) == [
        "start",
        "ringing",
        "awaiting_user",
        "awaiting_agent",
        "greeting",
        "listening",
        "speaking",
        "tool_loop",
        "ended",
    ]
    assert [state.id for state in leaf_states(TurnMachine) if state.final] == ["ended"]


@functools.cache  # (each call walks every configuration of the chart)
def declared_in(state: str) -> frozenset[str]:
    """Events a transition takes in some configuration of ``state``: its own, and those of
    the regions beside it (the caller's voice and the tool cap while the call is live, the
    realtime model's activity until the end) in a configuration a call can be in (the
    tool cap leaves ``tools_open`` only in the conversation, a tool reply is held only in
    speaking and tool_loop: ``regions_possible``)."""
    beside: dict[str, set[str]] = {}
    for configuration in filter(regions_possible, configurations()):
        beside.setdefault(configuration[0], set()).update(configuration[1:])
    leaves = [leaf for leaf in LEAF_STATES if public_state(leaf) == state]
    sources = {state}.union(*(beside.get(leaf, set()) for leaf in leaves))
    sources |= {public_state(source) for source in sources}  # (the cap's phases: capped)
    return frozenset(event for source, event, _ in declared_moves() if source in sources)


def test_states_are_the_documented_ones_with_the_voice_beside_the_live_ones() -> None:
    assert VOICE_STATES == ("caller_silent", "caller_speaking", "caller_spoke_over_greeting")
    assert MODEL_STATES == (
        "model_unlinked",
        "model_free",
        "model_responding",
        "cancelling_active",
        "cancelling_idle",
    )
    # what the model answers on its own: the caller's turns, tool output
    answers = (*REGION_STATES["turn_replies"], *REGION_STATES["tool_output_replies"])
    assert answers == (
        "turn_replies_on_request",
        "auto_turn_replies",
        "tool_replies_on_request",
        "auto_tool_replies",
    )
    assert states_beside()["ringing"] == frozenset({*MODEL_STATES, *answers})
    cap, reply = REGION_STATES["tool_cap"], REGION_STATES["tool_reply"]
    assert reply == ("held_after_caller_stops", "held_while_caller_speaks", "reply_free")
    handoff = REGION_STATES["handoff"]
    assert handoff == ("agent_keeps_call", "handing_off")
    assert states_beside()["speaking"] == frozenset(
        {*VOICE_STATES, *cap, *reply, *handoff, *MODEL_STATES, *answers}
    )
    assert states_beside()["ended"] == frozenset()
    assert {public_state(state) for state in LIVE_STATES} == {
        "awaiting_user",
        "awaiting_agent",
        "greeting",
        "listening",
        "speaking",
        "tool_loop",
    }


@pytest.mark.parametrize("state", STATES)
def test_every_pair_is_a_transition_or_ignored_with_a_reason(state: str) -> None:
    declared = declared_in(state)
    for event in EVENT_NAMES:
        if event not in declared:
            reason = IGNORED.get((state, event), "")
            assert reason.strip(), f"{state} × {event}: no transition, no reason"


def test_ignored_names_only_pairs_without_a_transition() -> None:
    ignored = {
        (state, event)
        for state in STATES
        for event in EVENT_NAMES
        if event not in declared_in(state)
    }
    assert set(IGNORED) == ignored  # no stale entry


def test_the_controller_prefilter_matches_introspection() -> None:
    expected = {
        state: {e for s, e, _ in declared_moves() if s == state}
        for state in {
            *STATES,
            *(public_state(leaf) for leaves in REGION_STATES.values() for leaf in leaves),
        }
    }
    # the greeting's events are those of its phases (the cap's, capped's)
    handled: dict[str, set[str]] = {}
    for state, events in handled_events().items():
        handled.setdefault(public_state(state), set()).update(events)
    assert handled == expected
    assert handled_events()["ended"] == frozenset()


POLICIES = [
    TurnPolicy(direction="outbound", greeting="Hi", idle_timeout=5, max_call_duration=60),
    TurnPolicy(
        direction="inbound",
        greeting_instructions="Greet",
        greeting_lock="mute_input",
        greeting_overlap="drop",
        interrupted_text="drop",
        mute_input_during_tools=True,
        max_tool_steps=1,
        on_answering_machine="continue",
        on_await_user_timeout="hang_up",
    ),
]


def plausible_contexts(
    state: str, policy: TurnPolicy
) -> list[tuple[TurnContext, tuple[str, ...]]]:
    """Contexts a call can be in while in ``state`` (``restore()`` refuses any other), each
    with the cap's phase beside it while live: a fresh one (tools open), and one with every
    flag and counter of that state busy (speeches active, tools capped and the final reply
    asked for or playing, an overlap being discarded); none in a state the policy never reaches
    (nor in the greeting's waits for a busy realtime model: these are pipeline calls, nor
    in its retry without a text)."""
    greeting = public_state(state) == "greeting"
    drops = policy.greeting_overlap == "drop"
    if (
        public_state(state) not in reachable_states(policy)
        or state.endswith("_awaiting_model")
        or (state.startswith("retry_") and policy.greeting is None)
        or (state == "discarding_overlap" and policy.greeting_overlap != "drop")
        or (state == "spill_over_window" and not (policy.mutes_greeting and drops))
        or (state.startswith("replay_") and policy.greeting_overlap != "answer_whole")
        or (state.startswith("replay_") and not policy.mutes_greeting)
    ):
        return []
    fresh = fresh_context(state, policy)
    # the greeting's overlap follows it before any tool round
    conversation = public_state(state) in ("listening", "speaking", "tool_loop", "ended")
    conversation = conversation and state not in OVERLAP_PHASES
    # after a greeting, a speech in flight is the agent's turn: never one in listening
    quiet = public_state(state) == "listening" and policy.has_greeting
    busy = attrs.evolve(
        fresh,
        first_words_item="u1"
        if greeting and (policy.direction == "outbound" or policy.first_speaker == "user")
        else None,
        greeting_speech_id=fresh.greeting_speech_id,
        active_speeches=frozenset() if quiet else frozenset({"s1", "s2"}),
        dropped_speeches=frozenset({"s2"})
        if state not in ("start", "ringing", "awaiting_user") and not quiet
        else frozenset(),
        tool_rounds=policy.max_tool_steps if conversation else 0,
        tool_speech_id=fresh.tool_speech_id,
        final_speech_id="s2" if state in ("speaking", "tool_loop", "ended") else None,
        reprompts=policy.idle_max_reprompts if conversation and policy.idle_timeout else 0,
    )
    cap = "final_reply_playing" if busy.final_speech_id else "final_reply_asked"
    capped = (cap,) if conversation and state != "ended" else ()
    return [(fresh, ()), (busy, capped)]


SILENT_PHASES = ("spill_over_window", "replay_unheard")
"""Phases of ``listening`` the caller's voice starting moves on: they are silent there."""


@pytest.mark.parametrize("policy", POLICIES, ids=["outbound", "inbound-muting"])
@pytest.mark.parametrize("state", LEAF_STATES)
def test_every_event_in_every_state_is_handled_without_error(
    state: str, policy: TurnPolicy
) -> None:
    controller = TurnController(policy, record=False)
    silent, speaking, spoke_over = VOICE_STATES
    # the caller's voice ends over the greeting only in one that answers an overlap whole
    over_greeting = public_state(state) == "greeting" and (
        not policy.mutes_greeting and policy.greeting_overlap == "answer_whole"
    )
    voices = [silent, speaking] + ([spoke_over] if over_greeting else [])
    for context, cap in plausible_contexts(state, policy):
        # a muted caller is silent; so is one in a phase their voice starting leaves
        quiet = input_muted(policy, {public_state(state)}) or state in SILENT_PHASES
        heard = [
            (voice,)
            for voice in voices
            if state in LIVE_STATES and not (quiet and voice == speaking)
        ] or [()]
        for voice, event in ((voice, event) for voice in heard for event in event_alphabet()):
            controller.restore((state, *voice, *cap), context)
            handled = controller.handled_events
            effects = controller.handle(event)
            assert isinstance(effects, tuple)
            assert all(isinstance(effect, fx.Effect) for effect in effects)
            assert controller.state in STATES
            if state == "ended":
                assert effects == ()
            if event.name not in handled:
                assert (effects, controller.configuration[0]) == ((), state), (
                    "ignored, yet acted on"
                )


def test_non_events_are_refused() -> None:
    controller = TurnController(POLICIES[0])
    with pytest.raises(TypeError, match="must be a turnfsm.events.Event"):
        controller.handle("call_answered")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "configuration",
    [
        "dancing",
        ("listening", "dancing"),
        ("ringing", "caller_silent"),
        ("caller_silent",),
        ("speaking", "caller_silent", "caller_speaking"),  # one region, twice
        ("caller_silent", "speaking"),  # the turn's state first
        (),
    ],
)
def test_restore_refuses_an_unknown_configuration(configuration: object) -> None:
    controller = TurnController(POLICIES[0])
    with pytest.raises(ValueError, match="configuration must be one of"):
        controller.restore(configuration, TurnContext())  # type: ignore[arg-type]
    assert controller.configuration == (
        "ringing",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )


def test_restore_takes_a_state_alone_as_the_caller_silent() -> None:
    controller = TurnController(POLICIES[0])
    controller.restore("listening", TurnContext())  # a phased state: its first phase
    assert controller.configuration == (
        "listening_open",
        "caller_silent",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    controller.restore(("speaking",), TurnContext(active_speeches=frozenset({"s1"})))
    # the regions left out are in their initial states
    assert controller.configuration == (
        "speaking",
        "caller_silent",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    controller.restore(("greeting_requested", "caller_speaking"), TurnContext())
    assert controller.snapshot()[0] == (
        "greeting_requested",
        "caller_speaking",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
