"""The caller's voice: a region beside the live turn, not a flag.

``caller_silent ⇄ caller_speaking`` follows the voice activity the unmuted input reports;
the turn's guards and actions that depend on it read the region."""

from __future__ import annotations

import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.context import TurnContext
from turnfsm.engine import ENGINES, EngineName
from turnfsm.machine import TurnMachine, atomic_states, chart_states, declare_chart

OUTBOUND = TurnPolicy(direction="outbound", greeting="Hi, it's Ada.", idle_timeout=5)
MUTING = TurnPolicy(
    direction="outbound", greeting="Hi, it's Ada.", greeting_lock="mute_input", idle_timeout=5
)


def answered(policy: TurnPolicy = OUTBOUND, engine: EngineName = "compiled") -> TurnController:
    controller = TurnController(policy, strict=True, engine=engine)
    controller.handle(ev.CallAnswered(at=0.0))
    return controller


def test_the_voice_exists_only_while_the_call_is_live() -> None:
    controller = TurnController(OUTBOUND, strict=True)
    assert controller.configuration == (
        "ringing",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    assert controller.handle(ev.UserSpeechStarted(at=0.1)) == ()  # nobody on the line
    assert controller.configuration == (
        "ringing",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    controller.handle(ev.CallAnswered(at=0.2))
    assert controller.configuration == (
        "awaiting_user",
        "caller_silent",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    controller.handle(ev.CallEnded(at=0.3, reason="user_initiated"))
    assert controller.configuration == ("ended",)


@pytest.mark.parametrize("engine", ENGINES)
def test_one_event_moves_both_regions_once(engine: EngineName) -> None:
    """The caller starts speaking: the voice moves and the turn cancels its timer, with
    no re-entry of the turn's state (no second active state in either region)."""
    controller = answered(engine=engine)
    effects = controller.handle(ev.UserSpeechStarted(at=1.0))
    assert effects == (fx.CancelTimer(timer="await_user"),)
    assert controller.configuration == (
        "awaiting_user",
        "caller_speaking",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    if controller._machine is not None:  # the engine's own active states, not the summary
        leaves = [s.id for s in controller._machine.configuration if not s.states]
    else:
        assert controller._engine is not None
        atomic = {state.id for state in atomic_states()}
        leaves = [state for state in controller._engine.active if state in atomic]
    assert sorted(leaves) == [
        "agent_keeps_call",
        "awaiting_user",
        "caller_speaking",
        "model_unlinked",
        "reply_free",
        "tool_replies_on_request",
        "tools_open",
        "turn_replies_on_request",
    ]
    assert controller.handle(ev.UserSpeechEnded(at=1.5)) == (
        fx.StartTimer(timer="await_user", seconds=OUTBOUND.await_user_timeout),
    )
    assert controller.configuration == (
        "awaiting_user",
        "caller_silent",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )


def test_muting_the_input_silences_the_voice_and_speech_it_cannot_hear_is_not_started() -> None:
    controller = answered(MUTING)
    controller.handle(ev.UserSpeechStarted(at=1.0))
    effects = controller.handle(ev.UserTurnCommitted(at=1.6, text="Hello?", item_id="u1"))
    assert any(isinstance(effect, fx.MuteInput) for effect in effects)
    # no end of speech comes through a muted input: the voice is silent with the mute
    assert controller.configuration[:2] == ("greeting_requested", "caller_silent")
    # a speech start the muted input reports late is not the caller's voice, nor an
    # overlap the greeting's end answers (the muted input holds its audio)
    controller.handle(ev.UserSpeechStarted(at=1.8))
    assert controller.configuration[:2] == ("greeting_requested", "caller_silent")


def test_the_greeting_ends_by_the_callers_voice() -> None:
    """``keep_listening`` + ``drop``: an overlap still going on when the greeting ends is
    discarded when the caller stops; one already over is cleared at once."""
    policy = TurnPolicy(direction="outbound", greeting="Hi", greeting_overlap="drop")
    for speaking, expected in ((True, ()), (False, (fx.ClearUserTurn(),))):
        controller = TurnController(policy, strict=True)
        controller.restore(
            ("greeting_playing", "caller_speaking" if speaking else "caller_silent"),
            TurnContext(greeting_speech_id="g", active_speeches=frozenset({"g"})),
        )
        effects = controller.handle(ev.AgentSpeechEnded(at=3.0, speech_id="g"))
        assert controller.state == "listening"
        assert tuple(e for e in effects if isinstance(e, fx.ClearUserTurn)) == expected
        assert (controller.configuration[0] == "discarding_overlap") == speaking


def test_the_idle_timer_waits_for_the_caller_to_stop() -> None:
    controller = TurnController(OUTBOUND, strict=True)
    context = TurnContext(active_speeches=frozenset({"s1"}))
    controller.restore(("speaking", "caller_speaking"), context)
    effects = controller.handle(ev.AgentSpeechEnded(at=2.0, speech_id="s1"))
    assert controller.configuration == (
        "listening_open",
        "caller_speaking",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_unlinked",
        "turn_replies_on_request",
        "tool_replies_on_request",
    )
    assert not any(isinstance(e, fx.StartTimer) for e in effects)
    assert controller.handle(ev.UserSpeechEnded(at=3.0)) == (
        fx.StartTimer(timer="idle", seconds=5),
    )


def test_call_wide_bookkeeping_is_not_taken_again_by_the_voice() -> None:
    """Transitions declared on ``call`` would be candidates in the voice region too: the
    chart declares its bookkeeping on the turn's regions, and only its moves to ``ended``
    on ``call`` (one transition, taken once)."""
    chart = declare_chart()
    states = chart_states(chart)
    targetless_on_call = [t for t in states["call"].transitions if t.target is None]
    assert targetless_on_call == []
    voice = TurnMachine.states_map["caller_voice"]
    assert {str(e) for t in voice.transitions for e in t.events} == set()
