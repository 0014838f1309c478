"""One scenario per transition: the exact effects, in order, and the state after.

Every controller here is strict: the safety monitor checks each step as well.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.effects import CLEANUP_EFFECTS
from turnfsm.machine import OUTCOME_DECISIONS
from turnfsm.rules import input_muted, turns_held
from turnfsm.testing import event_alphabet

GREETING = "Hi, this is Ada from Acme."
FALLBACK = "Sorry, I couldn't finish that. Could you ask me again?"


def held(controller: TurnController) -> bool:
    """User turns are held (a ``HoldUserTurns`` in force), as the machine's state says."""
    return turns_held(controller.policy, {controller.state, controller.configuration[0]})


def outbound(**options: Any) -> TurnController:
    return TurnController(
        TurnPolicy(direction="outbound", greeting=GREETING, **options), strict=True
    )


def inbound(**options: Any) -> TurnController:
    options.setdefault("greeting", GREETING)
    return TurnController(TurnPolicy(direction="inbound", **options), strict=True)


def user_first(**options: Any) -> TurnController:
    """Inbound, the caller speaks first, no greeting: the call goes live in ``listening``."""
    return TurnController(
        TurnPolicy(direction="inbound", first_speaker="user", **options), strict=True
    )


def greeted(controller: TurnController, at: float = 2.0) -> TurnController:
    """Answer an outbound call and commit the callee's "Hello?"; the greeting is created."""
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=at, text="Hello?", item_id="u1"))
    controller.handle(ev.AgentSpeechCreated(at=at, speech_id="g1", source="say"))
    assert controller.state == "greeting"
    return controller


def listening(**options: Any) -> TurnController:
    controller = user_first(**options)
    controller.handle(ev.SessionStarted(at=0.0))
    assert controller.state == "listening"
    return controller


def speaking(**options: Any) -> TurnController:
    controller = listening(**options)
    controller.handle(ev.UserTurnCommitted(at=1.0, text="What's my balance?", item_id="u1"))
    controller.handle(ev.AgentSpeechCreated(at=1.2, speech_id="s1"))
    assert controller.state == "speaking"
    return controller


# -- answering the call --------------------------------------------------------------------


def test_outbound_starts_ringing_and_ringing_is_informational() -> None:
    controller = outbound()
    assert controller.state == "ringing"
    assert controller.handle(ev.CallRinging(at=0.0)) == ()
    assert controller.state == "ringing"


def test_outbound_answer_waits_for_the_callee_with_a_timer() -> None:
    controller = outbound()
    assert controller.handle(ev.CallAnswered(at=0.0)) == (
        fx.StartTimer(timer="await_user", seconds=8.0),
    )
    assert controller.state == "awaiting_user"


def test_outbound_answer_starts_the_call_duration_timer_first() -> None:
    controller = outbound(max_call_duration=300, await_user_timeout=4)
    assert controller.handle(ev.CallAnswered(at=0.0)) == (
        fx.StartTimer(timer="max_duration", seconds=300),
        fx.StartTimer(timer="await_user", seconds=4),
    )


def test_outbound_agent_first_greets_on_answer() -> None:
    controller = outbound(first_speaker="agent")
    assert controller.handle(ev.CallAnswered(at=0.0)) == (
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING),
    )
    assert controller.state == "greeting"
    assert controller.handle(ev.CallAnswered(at=0.1)) == ()  # a duplicate answer


def test_callee_speech_pauses_the_await_timer() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.handle(ev.UserSpeechStarted(at=1.0)) == (fx.CancelTimer(timer="await_user"),)
    assert controller.handle(ev.UserSpeechEnded(at=1.5)) == (
        fx.StartTimer(timer="await_user", seconds=8.0),
    )
    assert controller.state == "awaiting_user"


def test_hello_committed_greets_in_reply_holding_user_turns() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    effects = controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert effects == (
        fx.CancelTimer(timer="await_user"),
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING, in_reply_to="u1"),
    )
    assert controller.state == "greeting"


@pytest.mark.parametrize(("overlap", "hold_audio"), [("answer_whole", True), ("drop", False)])
def test_hello_committed_greets_muted(overlap: str, hold_audio: bool) -> None:
    controller = outbound(greeting_lock="mute_input", greeting_overlap=overlap)
    controller.handle(ev.CallAnswered(at=0.0))
    effects = controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert effects == (
        fx.CancelTimer(timer="await_user"),
        fx.MuteInput(hold_audio=hold_audio),
        fx.StartGreeting(text=GREETING, in_reply_to="u1"),
    )


def test_generated_greeting_passes_the_instructions() -> None:
    controller = TurnController(
        TurnPolicy(direction="outbound", greeting_instructions="Introduce yourself"), strict=True
    )
    controller.handle(ev.CallAnswered(at=0.0))
    effects = controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert effects[-1] == fx.StartGreeting(instructions="Introduce yourself", in_reply_to="u1")


def test_hello_committed_before_the_answer_event_still_greets() -> None:
    controller = outbound(max_call_duration=60)
    effects = controller.handle(ev.UserTurnCommitted(at=0.5, text="Hello?", item_id="u1"))
    assert effects == (
        fx.StartTimer(timer="max_duration", seconds=60),
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING, in_reply_to="u1"),
    )
    assert controller.state == "greeting"


# -- the locked greeting -------------------------------------------------------------------


def test_greeting_speech_is_locked_and_a_second_speech_waits() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g1", source="say")) == (
        fx.LockSpeech(speech_id="g1"),
    )
    assert controller.handle(ev.AgentSpeechCreated(at=2.2, speech_id="s2")) == ()
    assert controller.state == "greeting"


def test_the_agents_own_speech_before_the_greeting_is_stopped_alone() -> None:
    """A filler the agent's code says in its turn hook is created before LiveKit's reply
    to "Hello?": only it is stopped (nothing before the greeting), and the reply after it
    is the greeting, locked."""
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    filler = ev.AgentSpeechCreated(at=2.0, speech_id="f1", source="say", from_agent_code=True)
    assert controller.handle(filler) == (fx.Interrupt(force=True, speech_id="f1"),)
    assert controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g1")) == (
        fx.LockSpeech(speech_id="g1"),
    )
    interrupted = ev.AgentSpeechEnded(at=2.1, speech_id="f1", interrupted=True)
    assert controller.handle(interrupted) == (  # nothing of it heard, nothing kept
        fx.DropUnspokenText(speech_id="f1", keep="spoken"),
    )
    assert controller.state == "greeting"  # the filler's end is not the greeting's
    later = ev.AgentSpeechCreated(at=3.0, speech_id="f2", source="say", from_agent_code=True)
    assert controller.handle(later) == ()  # the greeting is there: it plays after it
    assert controller.handle(ev.AgentSpeechEnded(at=6.0, speech_id="g1")) != ()
    assert controller.state == "speaking"  # the filler's turn, right after the greeting
    assert controller.handle(ev.AgentSpeechEnded(at=7.0, speech_id="f2", played_seconds=1)) == ()
    assert controller.state == "listening"


@pytest.mark.parametrize(
    ("lock", "overlap"),
    [
        ("mute_input", "answer_whole"),
        ("mute_input", "drop"),
        ("keep_listening", "answer_whole"),
        ("keep_listening", "drop"),
    ],
)
@pytest.mark.parametrize("caller_speaking", [False, True])
def test_a_speech_made_in_the_greeting_is_the_agents_turn_after_it(
    lock: str, overlap: str, caller_speaking: bool
) -> None:
    """The agent's own reply to "Hello?" after its refused greeting was said again (or a
    filler) waits behind the greeting: when the greeting ends it is the agent's turn, not
    the caller's, and the caller is released as when a reply starts in ``listening``."""
    controller = outbound(greeting_lock=lock, greeting_overlap=overlap, idle_timeout=5)
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g1", source="say"))
    assert controller.handle(ev.AgentSpeechCreated(at=2.2, speech_id="r1")) == ()
    if caller_speaking:
        controller.handle(ev.UserSpeechStarted(at=3.0))
    effects = controller.handle(ev.AgentSpeechEnded(at=6.0, speech_id="g1", played_seconds=4))
    assert controller.state == "speaking"
    assert controller.context.active_speeches == {"r1"}
    # the input is released, user turns resumed: nothing held into the agent's turn (I2)
    assert not held(controller)
    assert any(isinstance(e, fx.UnmuteInput) for e in effects) == (lock == "mute_input")
    assert not any(isinstance(e, fx.StartTimer) for e in effects)  # no idle: the agent talks
    controller.handle(ev.UserSpeechEnded(at=7.0))
    assert controller.handle(ev.AgentSpeechEnded(at=8.0, speech_id="r1", played_seconds=2)) == (
        fx.StartTimer(timer="idle", seconds=5),
    )
    assert controller.state == "listening"


def test_a_declined_turn_forgets_the_reply_livekit_prepared_for_it() -> None:
    """LiveKit declined the caller's turn (a backchannel under min_words over a tool
    step): the reply it prepared for it is parked for good. The machine stops it and no
    longer waits for it: the tool step goes on, and the end of its speech is the end of
    the agent's turn."""
    controller = speaking(idle_timeout=3)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    assert controller.handle(ev.AgentSpeechCreated(at=4.0, speech_id="p1")) == ()
    declined = ev.UserTurnDeclined(at=4.5, reason="rejected", prepared_speech_id="p1")
    assert controller.handle(declined) == (fx.Interrupt(force=True, speech_id="p1"),)
    assert (controller.state, controller.context.active_speeches) == ("tool_loop", {"s1"})
    controller.handle(ev.ToolStepFinished(at=6.0, speech_id="s1"))
    assert controller.handle(ev.AgentSpeechEnded(at=9.0, speech_id="s1", played_seconds=2)) == (
        fx.StartTimer(timer="idle", seconds=3),
    )
    assert controller.state == "listening"
    # LiveKit ends the stopped reply later: nothing waits for it any more
    late = ev.AgentSpeechEnded(at=9.1, speech_id="p1", interrupted=True)
    assert controller.handle(late) == (fx.DropUnspokenText(speech_id="p1", keep="spoken"),)
    assert controller.state == "listening"


def test_a_declined_turn_whose_reply_was_the_only_one_is_the_callers_turn_again() -> None:
    controller = listening(idle_timeout=3)
    controller.handle(ev.AgentSpeechCreated(at=1.0, speech_id="p1"))
    assert controller.state == "speaking"
    declined = ev.UserTurnDeclined(at=1.5, reason="stopped_by_agent", prepared_speech_id="p1")
    assert controller.handle(declined) == (
        fx.Interrupt(force=True, speech_id="p1"),
        fx.StartTimer(timer="idle", seconds=3),
    )
    assert controller.state == "listening"


@pytest.mark.parametrize("prepared", ["", "unknown", "s1"])
def test_a_declined_turn_without_a_prepared_reply_changes_nothing(prepared: str) -> None:
    """No reply prepared, one the machine never saw, or the speech running the tool step
    (scheduled: never one LiveKit leaves prepared)."""
    controller = speaking()
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    declined = ev.UserTurnDeclined(
        at=4.0, reason="false_interruption", prepared_speech_id=prepared
    )
    assert controller.handle(declined) == ()
    assert (controller.state, controller.context.active_speeches) == ("tool_loop", {"s1"})


def test_a_declined_turn_leaves_a_reply_livekit_committed_alone() -> None:
    """A reply whose message LiveKit committed (interrupted: its unspoken text dropped)
    was scheduled and played: never one LiveKit leaves prepared. The machine still waits
    for its end."""
    controller = speaking(interrupted_text="spoken")
    cut = ev.AssistantMessageCommitted(at=2.0, speech_id="s1", text="Your bal", interrupted=True)
    assert controller.handle(cut) != ()  # its unspoken text dropped
    declined = ev.UserTurnDeclined(at=2.1, reason="rejected", prepared_speech_id="s1")
    assert controller.handle(declined) == ()
    assert (controller.state, controller.context.active_speeches) == ("speaking", {"s1"})


def test_nothing_interrupts_the_greeting() -> None:
    controller = greeted(outbound())
    for event in (
        ev.UserSpeechStarted(at=3.0),
        ev.UserTranscript(at=3.1, text="wait"),
        ev.UserSpeechEnded(at=3.5),
        ev.UserTurnCommitted(at=3.6, text="wait", item_id="u2"),  # answered after, whole
        ev.AgentSpeechStarted(at=3.7, speech_id="g1"),
    ):
        assert controller.handle(event) == ()
    assert controller.state == "greeting"


def test_drop_rejects_a_turn_committed_inside_the_greeting_but_not_the_first_words() -> None:
    controller = greeted(outbound(greeting_overlap="drop"))
    assert controller.handle(ev.UserTurnCommitted(at=3.0, text="Hello?", item_id="u1")) == ()
    assert controller.handle(ev.UserTurnCommitted(at=3.5, text="who?", item_id="u2")) == (
        fx.RejectUserTurn(item_id="u2"),
    )


def test_a_speech_end_that_is_not_the_greeting_keeps_the_greeting() -> None:
    controller = greeted(outbound())
    assert controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="other")) == ()
    assert controller.state == "greeting"


def test_keep_listening_answer_whole_silent_caller() -> None:
    controller = greeted(outbound())
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.ResumeUserTurns(commit_pending=False),
    )
    assert controller.state == "listening"


def test_keep_listening_answer_whole_commits_an_overlap_finished_inside_the_lock() -> None:
    controller = greeted(outbound())
    controller.handle(ev.UserSpeechStarted(at=3.0))
    controller.handle(ev.UserSpeechEnded(at=4.0))
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.ResumeUserTurns(commit_pending=True),
    )


def test_keep_listening_answer_whole_caller_still_speaking_commits_on_their_own_end() -> None:
    controller = greeted(outbound(idle_timeout=6))
    controller.handle(ev.UserSpeechStarted(at=3.0))
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.ResumeUserTurns(commit_pending=False),  # no idle timer while the caller speaks
    )
    assert controller.handle(ev.UserSpeechEnded(at=6.0)) == (
        fx.StartTimer(timer="idle", seconds=6),
    )
    assert (
        controller.handle(ev.UserTurnCommitted(at=6.2, text="is it about my order", item_id="u2"))
        == ()
    )


def test_keep_listening_drop_silent_caller_clears_the_held_turn() -> None:
    controller = greeted(outbound(greeting_overlap="drop"))
    controller.handle(ev.UserSpeechStarted(at=3.0))
    controller.handle(ev.UserSpeechEnded(at=3.5))
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.ClearUserTurn(),
        fx.ResumeUserTurns(commit_pending=False),
    )
    assert controller.state == "listening"


def test_keep_listening_drop_overlap_discarded_when_the_caller_stops() -> None:
    controller = greeted(outbound(greeting_overlap="drop", idle_timeout=6))
    controller.handle(ev.UserSpeechStarted(at=3.0))
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == ()
    assert controller.state == "listening"
    assert held(controller)
    assert controller.handle(ev.UserSpeechEnded(at=5.4)) == (
        fx.ClearUserTurn(),
        fx.ResumeUserTurns(commit_pending=False),
        fx.StartTimer(timer="idle", seconds=6),
    )
    # the next speech is a fresh turn
    assert controller.handle(ev.UserSpeechStarted(at=7.0)) == (fx.CancelTimer(timer="idle"),)
    assert controller.handle(ev.UserSpeechEnded(at=8.0)) == (
        fx.StartTimer(timer="idle", seconds=6),
    )


def test_keep_listening_drop_overlap_discarded_when_the_agent_speaks_first() -> None:
    controller = greeted(outbound(greeting_overlap="drop"))
    controller.handle(ev.UserSpeechStarted(at=3.0))
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    assert controller.handle(ev.AgentSpeechCreated(at=5.5, speech_id="s2")) == (
        fx.ClearUserTurn(),
        fx.ResumeUserTurns(commit_pending=False),
    )
    assert controller.state == "speaking"


def test_mute_input_drop_spill_over_within_the_window_is_held_and_discarded() -> None:
    controller = greeted(
        outbound(greeting_lock="mute_input", greeting_overlap="drop", idle_timeout=6)
    )
    # the window opens as the greeting ends, for spill_over_window (0.5 s)
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.UnmuteInput(replay_held_audio=False),
        fx.StartTimer(timer="idle", seconds=6),
        fx.StartTimer(timer="spill_over", seconds=0.5),
    )
    assert controller.handle(ev.UserSpeechStarted(at=5.5)) == (  # its timer not expired yet
        fx.CancelTimer(timer="spill_over"),
        fx.CancelTimer(timer="idle"),
        fx.HoldUserTurns(),
    )
    assert controller.handle(ev.UserSpeechEnded(at=6.0)) == (
        fx.ClearUserTurn(),
        fx.ResumeUserTurns(commit_pending=False),
        fx.StartTimer(timer="idle", seconds=6),
    )
    # the window is closed: the next speech is a turn
    assert controller.handle(ev.UserSpeechStarted(at=6.1)) == (fx.CancelTimer(timer="idle"),)


def test_no_idle_reprompt_while_the_caller_speaks_the_spill_over() -> None:
    """Regression: the spill-over branch left the idle timer running during the speech."""
    controller = greeted(
        outbound(greeting_lock="mute_input", greeting_overlap="drop", idle_timeout=6)
    )
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    controller.handle(ev.UserSpeechStarted(at=5.2))
    assert "idle" not in controller.running_timers
    assert controller.handle(ev.IdleTimerExpired(at=11.0)) == ()


def test_mute_input_drop_speech_after_the_window_is_a_turn() -> None:
    controller = greeted(outbound(greeting_lock="mute_input", greeting_overlap="drop"))
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    assert controller.configuration[0] == "spill_over_window"
    assert controller.handle(ev.SpillOverTimerExpired(at=5.5)) == ()
    assert controller.configuration[0] == "listening_open"
    assert controller.handle(ev.UserSpeechStarted(at=5.51)) == ()
    assert not held(controller)


def test_mute_input_drop_a_turn_closes_the_spill_over_window() -> None:
    controller = greeted(outbound(greeting_lock="mute_input", greeting_overlap="drop"))
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    committed = ev.UserTurnCommitted(at=5.2, text="Hi", item_id="u2")
    assert controller.handle(committed) == (fx.CancelTimer(timer="spill_over"),)
    assert controller.configuration[0] == "listening_open"
    assert controller.handle(ev.UserSpeechStarted(at=5.3)) == ()  # a new turn, not a tail
    assert not held(controller)
    assert controller.handle(ev.UserSpeechEnded(at=6.0)) == ()


def test_mute_input_answer_whole_replays_the_held_audio_as_one_turn() -> None:
    controller = greeted(outbound(greeting_lock="mute_input", greeting_overlap="answer_whole"))
    # the held audio is replayed, user turns held until the replay is over
    assert controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3)) == (
        fx.UnmuteInput(replay_held_audio=True),
        fx.HoldUserTurns(),
    )
    assert controller.handle(ev.UserSpeechStarted(at=5.1)) == ()  # no spill-over window
    assert controller.handle(ev.UserSpeechEnded(at=5.4)) == ()
    assert controller.state == "listening"
    assert controller.configuration[0] == "replay_heard_caller"
    # another lever's outcome is not the replay's end
    assert controller.handle(ev.EffectOutcome(at=5.5, effect="start_timer", outcome="done")) == ()
    # the replay's unmute reports its outcome when the replay is over: one turn now
    replayed = ev.EffectOutcome(at=5.8, effect="unmute_input", outcome="done")
    assert controller.handle(replayed) == (fx.ResumeUserTurns(commit_pending=True),)
    assert not held(controller)
    assert controller.configuration[0] == "listening_open"
    assert controller.handle(replayed) == ()  # once


@pytest.mark.parametrize(
    ("heard", "speaking", "commit"),
    [(False, False, False), (True, True, False), (True, False, True)],
    ids=["nothing-said", "caller-still-speaking", "caller-done"],
)
def test_the_replay_is_committed_only_when_the_caller_said_something_and_stopped(
    heard: bool, speaking: bool, commit: bool
) -> None:
    controller = greeted(outbound(greeting_lock="mute_input", greeting_overlap="answer_whole"))
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    if heard:
        controller.handle(ev.UserSpeechStarted(at=5.1))
        if not speaking:
            controller.handle(ev.UserSpeechEnded(at=5.4))
    # a failed unmute ends the wait too (its fallback opens the gate without replay)
    replayed = ev.EffectOutcome(at=5.8, effect="unmute_input", outcome="failed")
    assert controller.handle(replayed) == (fx.ResumeUserTurns(commit_pending=commit),)


def test_the_agent_speaking_during_the_replay_ends_the_hold() -> None:
    controller = greeted(
        outbound(greeting_lock="mute_input", greeting_overlap="answer_whole", idle_timeout=1.0)
    )
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    controller.handle(ev.IdleTimerExpired(at=6.0))  # a re-prompt, said
    effects = controller.handle(ev.AgentSpeechCreated(at=6.0, speech_id="r1", source="say"))
    assert fx.ResumeUserTurns(commit_pending=False) in effects
    assert controller.state == "speaking"
    assert not held(controller)
    replayed = ev.EffectOutcome(at=6.5, effect="unmute_input", outcome="done")
    assert controller.handle(replayed) == ()


def test_a_hang_up_during_the_replay_releases_the_turns_once() -> None:
    controller = greeted(outbound(greeting_lock="mute_input", greeting_overlap="answer_whole"))
    controller.handle(ev.AgentSpeechEnded(at=5.0, speech_id="g1", played_seconds=3))
    effects = controller.handle(ev.CallEnded(at=5.5, reason="user_initiated"))
    assert effects.count(fx.ResumeUserTurns(commit_pending=False)) == 1
    assert controller.state == "ended"


def test_interrupted_greeting_end_still_releases_the_lock_and_drops_unspoken_text() -> None:
    controller = greeted(outbound(greeting_lock="mute_input"))
    assert controller.handle(
        ev.AgentSpeechEnded(at=4.0, speech_id="g1", interrupted=True, played_seconds=1.0)
    ) == (
        fx.UnmuteInput(replay_held_audio=True),
        fx.DropUnspokenText(speech_id="g1", keep="spoken"),
        fx.HoldUserTurns(),
    )


@pytest.mark.parametrize("outcome", ["refused", "failed"])
def test_a_greeting_that_did_not_start_is_said_again_locked(outcome: str) -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    failed = ev.EffectOutcome(at=2.0, effect="start_greeting", outcome=outcome, detail="boom")
    assert controller.handle(failed) == (
        fx.Say(text=GREETING, reason="greeting", allow_interruptions=False, in_reply_to="u1"),
    )
    assert controller.state == "greeting"
    assert controller.configuration[0] == "retry_requested"
    assert held(controller)  # still locked
    assert controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g1", source="say")) == (
        fx.LockSpeech(speech_id="g1"),
    )
    assert controller.configuration[0] == "retry_playing"
    controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="g1", played_seconds=1.9))
    assert controller.state == "listening"  # the retry is over with the greeting


def test_a_greeting_retry_that_fails_too_ends_the_call() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    controller.handle(ev.EffectOutcome(at=2.0, effect="start_greeting", outcome="refused"))
    assert controller.handle(ev.EffectOutcome(at=2.0, effect="say", outcome="failed")) == (
        fx.ResumeUserTurns(commit_pending=False),
        fx.EndCall(reason="greeting_failed"),
    )
    assert controller.state == "ended"


def test_a_generated_greeting_that_did_not_start_ends_the_call() -> None:
    controller = inbound(greeting=None, greeting_instructions="Greet", greeting_lock="mute_input")
    controller.handle(ev.SessionStarted(at=0.0))
    assert controller.handle(
        ev.EffectOutcome(at=0.1, effect="start_greeting", outcome="failed")
    ) == (fx.UnmuteInput(replay_held_audio=False), fx.EndCall(reason="greeting_failed"))


def test_a_greeting_failure_after_its_speech_exists_is_traced_only() -> None:
    controller = greeted(outbound())
    late = ev.EffectOutcome(at=2.5, effect="start_greeting", outcome="failed")
    assert controller.handle(late) == ()
    assert controller.state == "greeting"


def test_every_effect_has_a_decided_outcome() -> None:
    assert set(OUTCOME_DECISIONS) == set(fx.EFFECTS_BY_NAME)
    assert all(reason.strip() for reason in OUTCOME_DECISIONS.values())


# -- the await timer -----------------------------------------------------------------------


def test_await_timeout_greets_a_silent_callee() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.handle(ev.AwaitUserTimerExpired(at=8.0)) == (
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING),
    )
    assert controller.state == "greeting"


def test_await_timeout_hangs_up_on_a_silent_callee() -> None:
    controller = outbound(on_await_user_timeout="hang_up", max_call_duration=60)
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.handle(ev.AwaitUserTimerExpired(at=8.0)) == (
        fx.CancelTimer(timer="max_duration"),
        fx.EndCall(reason="no_answer"),
    )
    assert controller.state == "ended"


def test_stale_timer_after_cancel_is_ignored() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    controller.handle(ev.UserSpeechStarted(at=1.0))  # cancels the await timer
    assert controller.handle(ev.AwaitUserTimerExpired(at=8.0)) == ()
    assert controller.state == "awaiting_user"


def test_timer_of_another_state_is_ignored() -> None:
    controller = listening(idle_timeout=5)
    assert controller.handle(ev.AwaitUserTimerExpired(at=1.0)) == ()
    assert controller.handle(ev.MaxDurationTimerExpired(at=1.0)) == ()
    assert controller.state == "listening"


def test_no_await_timer_when_disabled() -> None:
    controller = outbound(await_user_timeout=None)
    assert controller.handle(ev.CallAnswered(at=0.0)) == ()
    assert controller.handle(ev.AwaitUserTimerExpired(at=8.0)) == ()


# -- inbound starts ------------------------------------------------------------------------


def test_inbound_agent_first_greets_on_session_start() -> None:
    controller = inbound(greeting_lock="mute_input", greeting_overlap="drop")
    assert controller.state == "start"
    assert controller.handle(ev.SessionStarted(at=0.0)) == (
        fx.MuteInput(hold_audio=False),
        fx.StartGreeting(text=GREETING),
    )
    assert controller.state == "greeting"
    assert controller.handle(ev.SessionStarted(at=0.1)) == ()
    assert controller.handle(ev.AgentSpeechCreated(at=0.2, speech_id="g1", source="say")) == (
        fx.LockSpeech(speech_id="g1"),
    )


def test_inbound_events_before_session_start_do_not_greet() -> None:
    controller = inbound()
    assert controller.handle(ev.UserSpeechStarted(at=0.0)) == ()
    assert controller.state == "start"
    assert controller.handle(ev.SessionStarted(at=0.1)) == (
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING),
    )
    assert controller.state == "greeting"


def test_inbound_user_first_with_greeting_awaits_the_caller() -> None:
    controller = inbound(first_speaker="user")
    assert controller.state == "start"
    assert controller.handle(ev.SessionStarted(at=0.0)) == (
        fx.StartTimer(timer="await_user", seconds=8.0),
    )
    assert controller.state == "awaiting_user"
    assert controller.handle(ev.UserTurnCommitted(at=1.0, text="Hi", item_id="u1")) == (
        fx.CancelTimer(timer="await_user"),
        fx.HoldUserTurns(),
        fx.StartGreeting(text=GREETING, in_reply_to="u1"),
    )


def test_inbound_user_first_without_greeting_listens() -> None:
    controller = user_first(idle_timeout=5, max_call_duration=120)
    assert controller.state == "start"
    assert controller.handle(ev.SessionStarted(at=0.0)) == (
        fx.StartTimer(timer="max_duration", seconds=120),
        fx.StartTimer(timer="idle", seconds=5),
    )
    assert controller.state == "listening"
    assert controller.handle(ev.UserSpeechStarted(at=1.0)) == (fx.CancelTimer(timer="idle"),)
    assert controller.handle(ev.UserSpeechEnded(at=2.0)) == (
        fx.StartTimer(timer="idle", seconds=5),
    )
    assert controller.handle(ev.UserTurnCommitted(at=2.1, text="hi", item_id="u1")) == ()
    assert controller.handle(ev.AgentSpeechCreated(at=2.5, speech_id="s1")) == (
        fx.CancelTimer(timer="idle"),
    )
    assert controller.state == "speaking"
    assert controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="s1", played_seconds=1.5)) == (
        fx.StartTimer(timer="idle", seconds=5),
    )
    assert controller.state == "listening"


def own_words(**options: Any) -> TurnController:
    """Inbound, the agent greets first in its own words: no greeting text."""
    return TurnController(TurnPolicy(direction="inbound", **options), strict=True)


def test_speech_going_on_as_the_greeting_starts_is_an_overlap_answered_whole() -> None:
    """The caller speaks as the agent's first speech, the greeting, is created, and stops
    in it: under keep_listening + answer_whole what they said is one turn at the greeting's
    end, as speech that started in it is (before the caller's voice told it, only a start
    in the greeting counted: this speech was held with the greeting's turns, and never
    committed)."""
    controller = own_words(greeting_lock="keep_listening", greeting_overlap="answer_whole")
    controller.handle(ev.SessionStarted(at=0.0))
    controller.handle(ev.UserSpeechStarted(at=0.5))
    greeting = ev.AgentSpeechCreated(at=0.6, speech_id="g1", source="say", from_agent_code=True)
    controller.handle(greeting)
    assert controller.configuration[:2] == ("greeting_playing", "caller_speaking")
    controller.handle(ev.UserSpeechEnded(at=1.0))
    assert controller.configuration[:2] == ("greeting_playing", "caller_spoke_over_greeting")
    effects = controller.handle(ev.AgentSpeechEnded(at=3.0, speech_id="g1", played_seconds=2.4))
    assert fx.ResumeUserTurns(commit_pending=True) in effects
    assert controller.configuration[:2] == ("listening_open", "caller_silent")


@pytest.mark.parametrize("lock", ["keep_listening", "mute_input"])
@pytest.mark.parametrize("overlap", ["answer_whole", "drop"])
def test_only_a_greeting_that_answers_an_overlap_whole_remembers_it(
    lock: str, overlap: str
) -> None:
    controller = greeted(outbound(greeting_lock=lock, greeting_overlap=overlap))
    controller.handle(ev.UserSpeechStarted(at=2.5))
    controller.handle(ev.UserSpeechEnded(at=2.8))
    remembered = lock == "keep_listening" and overlap == "answer_whole"
    assert ("caller_spoke_over_greeting" in controller.configuration) == remembered
    # speaking again, the caller is no longer silent over the greeting
    controller.handle(ev.UserSpeechStarted(at=3.0))
    assert "caller_spoke_over_greeting" not in controller.configuration


def test_own_words_waits_for_the_agents_first_speech_holding_nothing() -> None:
    controller = own_words(max_call_duration=120)
    assert controller.handle(ev.SessionStarted(at=0.0)) == (
        fx.StartTimer(timer="max_duration", seconds=120),
    )
    assert controller.state == "awaiting_agent"
    assert controller.handle(ev.UserSpeechStarted(at=0.1)) == ()  # nothing held yet
    assert controller.configuration[:2] == ("awaiting_agent", "caller_speaking")


@pytest.mark.parametrize(
    ("lock", "held", "released"),
    [
        ("keep_listening", fx.HoldUserTurns(), fx.ResumeUserTurns()),
        ("mute_input", fx.MuteInput(hold_audio=True), fx.UnmuteInput(replay_held_audio=True)),
    ],
)
def test_own_words_the_agents_first_speech_is_the_locked_greeting(
    lock: str, held: fx.Effect, released: fx.Effect
) -> None:
    controller = own_words(greeting_lock=lock)
    controller.handle(ev.SessionStarted(at=0.0))
    first = ev.AgentSpeechCreated(at=0.2, speech_id="g1", source="reply", from_agent_code=True)
    # locked as it is created, the caller held; nothing asked for: the speech exists
    assert controller.handle(first) == (fx.LockSpeech(speech_id="g1"), held)
    assert controller.state == "greeting"
    second = ev.AgentSpeechCreated(at=0.3, speech_id="s2", source="say", from_agent_code=True)
    assert controller.handle(second) == ()  # queued behind the greeting by LiveKit
    # released exactly at its end
    ended = ev.AgentSpeechEnded(at=3.0, speech_id="g1", played_seconds=2.8)
    assert controller.handle(ended) == (released,)
    assert controller.state == "speaking"  # the queued speech plays next


def test_own_words_a_caller_who_speaks_first_is_answered_without_a_greeting() -> None:
    controller = own_words()
    controller.handle(ev.SessionStarted(at=0.0))
    assert controller.handle(ev.UserTurnCommitted(at=1.0, text="Hi?", item_id="u1")) == ()
    assert controller.state == "listening"
    assert controller.handle(ev.AgentSpeechCreated(at=1.2, speech_id="s1")) == ()
    assert controller.state == "speaking"


def test_own_words_livekits_own_reply_is_no_greeting() -> None:
    """A reply LiveKit prepares before the caller's turn ends (preemptive generation) is
    the conversation's first speech, never locked."""
    controller = own_words()
    controller.handle(ev.SessionStarted(at=0.0))
    assert controller.handle(ev.AgentSpeechCreated(at=0.9, speech_id="s1")) == ()
    assert controller.state == "speaking"


# -- agent speech --------------------------------------------------------------------------


@pytest.mark.parametrize("answered", [False, True])
def test_agent_speech_before_the_callee_is_stopped(answered: bool) -> None:
    controller = outbound()
    if answered:
        controller.handle(ev.CallAnswered(at=0.0))
    before = controller.state
    assert controller.handle(ev.AgentSpeechCreated(at=0.5, speech_id="s0")) == (
        fx.Interrupt(force=True),
    )
    assert controller.state == before
    assert controller.handle(ev.AgentSpeechEnded(at=0.6, speech_id="s0", interrupted=True)) == (
        fx.DropUnspokenText(speech_id="s0", keep="spoken"),
    )


def test_reply_created_while_listening_speaks() -> None:
    controller = listening()
    controller.handle(ev.UserTurnCommitted(at=1.0, text="What's my balance?", item_id="u1"))
    assert controller.handle(ev.AgentSpeechCreated(at=1.2, speech_id="s1")) == ()
    assert controller.state == "speaking"
    assert controller.handle(ev.AgentSpeechStarted(at=1.4, speech_id="s1")) == ()


def test_speaking_waits_for_the_last_active_speech() -> None:
    controller = speaking()
    assert controller.handle(ev.AgentSpeechCreated(at=1.5, speech_id="s2")) == ()
    assert controller.handle(ev.AgentSpeechEnded(at=2.0, speech_id="s1", played_seconds=1)) == ()
    assert controller.state == "speaking"
    assert controller.handle(ev.AgentSpeechEnded(at=3.0, speech_id="s2", played_seconds=1)) == ()
    assert controller.state == "listening"


@pytest.mark.parametrize(("policy", "keep"), [("spoken", "spoken"), ("drop", "nothing")])
def test_barge_in_drops_the_unspoken_text(policy: str, keep: str) -> None:
    controller = speaking(interrupted_text=policy)
    assert controller.handle(ev.UserSpeechStarted(at=2.0)) == ()
    effects = controller.handle(
        ev.AgentSpeechEnded(at=2.1, speech_id="s1", interrupted=True, played_seconds=0.9)
    )
    assert effects == (fx.DropUnspokenText(speech_id="s1", keep=keep),)
    assert controller.state == "listening"
    late = ev.AssistantMessageCommitted(at=2.2, item_id="a1", speech_id="s1", interrupted=True)
    assert controller.handle(late) == ()  # committed after the end: dropped once only


@pytest.mark.parametrize(("policy", "keep"), [("spoken", "spoken"), ("drop", "nothing")])
def test_message_committed_before_the_end_drops_once(policy: str, keep: str) -> None:
    controller = speaking(interrupted_text=policy)
    committed = ev.AssistantMessageCommitted(
        at=2.0, item_id="a1", speech_id="s1", text="Your balance is", interrupted=True
    )
    assert controller.handle(committed) == (fx.DropUnspokenText(speech_id="s1", keep=keep),)
    assert controller.handle(committed) == ()
    assert (
        controller.handle(
            ev.AgentSpeechEnded(at=2.1, speech_id="s1", interrupted=True, played_seconds=0.9)
        )
        == ()
    )
    assert controller.state == "listening"


def test_keep_policy_never_drops() -> None:
    controller = speaking(interrupted_text="keep")
    committed = ev.AssistantMessageCommitted(
        at=2.0, item_id="a1", speech_id="s1", interrupted=True
    )
    assert controller.handle(committed) == ()
    ended = ev.AgentSpeechEnded(at=2.1, speech_id="s1", interrupted=True, played_seconds=0.9)
    assert controller.handle(ended) == ()


def test_a_message_not_interrupted_is_not_dropped() -> None:
    controller = speaking()
    committed = ev.AssistantMessageCommitted(at=2.0, item_id="a1", speech_id="s1", text="ok")
    assert controller.handle(committed) == ()


# -- tools ---------------------------------------------------------------------------------


def tool_round(controller: TurnController, speech: str = "s1", calls: int = 1) -> tuple:
    started = controller.handle(ev.ToolStepStarted(at=3.0, speech_id=speech, calls=calls))
    assert controller.state == "tool_loop"
    finished = controller.handle(ev.ToolStepFinished(at=3.5, speech_id=speech, calls=calls))
    assert controller.state == "speaking"
    return started + finished


@pytest.mark.parametrize("cap", [1, 3])
def test_tool_loop_runs_exactly_the_cap_then_one_final_reply(cap: int) -> None:
    controller = speaking(max_tool_steps=cap)
    for _ in range(cap - 1):
        assert tool_round(controller) == ()
    assert tool_round(controller) == (
        fx.CancelToolReply(speech_id="s1"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )
    assert controller.context.tool_rounds == cap
    # the model calls tools again in the final reply: not counted as it starts (LiveKit
    # can cancel nothing then), its reply cancelled as it ends, no second final reply
    assert (
        controller.handle(ev.AgentSpeechCreated(at=4.0, speech_id="s2", source="tool_reply")) == ()
    )
    assert controller.handle(ev.ToolStepStarted(at=4.1, speech_id="s2")) == ()
    assert controller.context.tool_rounds == cap
    assert controller.handle(ev.ToolStepFinished(at=4.2, speech_id="s2")) == (
        fx.CancelToolReply(speech_id="s2"),
    )


def test_an_earlier_turns_final_reply_ending_at_the_next_cap_leaves_tools_forbidden() -> None:
    """Realtime: the final reply of turn 1 still plays when turn 2's rounds reach the cap.
    It is not turn 2's final reply: its end neither allows tools again before turn 2's is
    said (the model would be asked for it with tools) nor says the fallback over it."""
    controller = user_first(max_tool_steps=1)
    controller.handle(ev.RealtimeModelLinked(at=0.0, replies_to_turns=True))
    controller.handle(ev.SessionStarted(at=0.0))
    for turn, at in (("1", 1.0), ("2", 2.0)):
        controller.handle(ev.UserTurnCommitted(at=at, text="Look it up.", item_id=f"u{turn}"))
        controller.handle(ev.AgentSpeechCreated(at=at, speech_id=f"s{turn}"))
        controller.handle(ev.ToolStepStarted(at=at + 0.1, speech_id=f"s{turn}"))
        capped = controller.handle(ev.ToolStepFinished(at=at + 0.2, speech_id=f"s{turn}"))
        assert capped == (fx.CancelToolReply(speech_id=f"s{turn}"), fx.ForbidTools())
        if turn == "1":
            step_said = ev.AgentSpeechEnded(at=1.3, speech_id="s1", played_seconds=1)
            assert controller.handle(step_said) == (
                fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
            )
            controller.handle(ev.AgentSpeechCreated(at=1.4, speech_id="f1"))
    assert controller.handle(ev.AgentSpeechEnded(at=2.3, speech_id="f1")) == ()
    asked = controller.handle(ev.AgentSpeechEnded(at=2.4, speech_id="s2", played_seconds=1))
    assert asked == (fx.FinalReplyWithoutTools(fallback_text=FALLBACK),)
    controller.handle(ev.AgentSpeechCreated(at=2.5, speech_id="f2"))
    said = ev.AgentSpeechEnded(at=3.0, speech_id="f2", played_seconds=0.5)
    assert controller.handle(said) == (fx.AllowTools(),)


def test_a_capped_step_that_hands_the_call_over_asks_no_final_reply() -> None:
    """The new agent speaks next (its on_enter); the old one, draining, says nothing."""
    controller = listening(max_tool_steps=1)
    controller.handle(ev.ToolStepStarted(at=1.0, speech_id="s1"))
    handoff = ev.ToolStepFinished(at=1.5, speech_id="s1", hands_over=True)
    assert controller.handle(handoff) == (fx.CancelToolReply(speech_id="s1"),)
    assert controller.state == "speaking"
    assert "tools_open" in controller.configuration  # no final reply to come
    controller.handle(ev.AgentSpeechEnded(at=1.6, speech_id="s1", played_seconds=0.0))
    assert controller.state == "listening"


def _two_replies_in_tools(controller: TurnController) -> None:
    """Seeds 22032 and 27779: the reply s1 runs a tool step; the caller's next turn
    commits meanwhile (LiveKit interrupts s1, whose step still runs) and its reply s2
    starts a step of its own, the turn's first round (the cap: 1)."""
    controller.handle(ev.ToolStepStarted(at=2.0, speech_id="s1"))
    controller.handle(ev.UserTurnCommitted(at=3.0, text="Can I move it?", item_id="u2"))
    controller.handle(ev.AgentSpeechCreated(at=3.0, speech_id="s2"))
    controller.handle(ev.AgentSpeechInterrupted(at=3.0, speech_id="s1"))
    assert controller.handle(ev.ToolStepStarted(at=3.1, speech_id="s2")) == ()
    assert controller.context.tool_rounds == 1


@pytest.mark.parametrize(
    ("handing_over", "then_capped"),
    [("s2", "s1"), ("s1", "s2")],
    ids=["the-turn's-step-hands-over-then-the-old-one-ends", "the-old-step-hands-over"],
)
def test_no_final_reply_at_the_cap_once_a_step_handed_the_call_over(
    handing_over: str, then_capped: str
) -> None:
    """The outgoing agent, draining, cannot say a final reply (LiveKit refuses its new
    speech: the lever failed), whichever of its replies' steps reaches the cap after
    another one handed the call over; the new agent speaks next."""
    controller = speaking(max_tool_steps=1)
    _two_replies_in_tools(controller)
    handoff = ev.ToolStepFinished(at=3.5, speech_id=handing_over, hands_over=True)
    assert controller.handle(handoff) == (fx.CancelToolReply(speech_id=handing_over),)
    assert "handing_off" in controller.configuration
    capped = ev.ToolStepFinished(at=4.0, speech_id=then_capped)
    assert controller.handle(capped) == (fx.CancelToolReply(speech_id=then_capped),)
    assert "tools_open" in controller.configuration  # no final reply to come
    # the next user turn (the new agent's) is capped as usual
    controller.handle(ev.UserTurnCommitted(at=6.0, text="Thanks.", item_id="u3"))
    assert "agent_keeps_call" in controller.configuration
    controller.handle(ev.AgentSpeechCreated(at=6.0, speech_id="s3"))
    assert tool_round(controller, "s3") == (
        fx.CancelToolReply(speech_id="s3"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )


def test_parallel_calls_count_as_one_round() -> None:
    controller = speaking(max_tool_steps=2)
    assert tool_round(controller, calls=3) == ()
    assert controller.context.tool_rounds == 1
    assert tool_round(controller, calls=3) == (
        fx.CancelToolReply(speech_id="s1"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )


def test_tool_step_straight_from_listening() -> None:
    controller = listening(max_tool_steps=1)
    assert controller.handle(ev.ToolStepStarted(at=1.0, speech_id="s1")) == ()
    assert controller.state == "tool_loop"
    assert controller.handle(ev.ToolStepFinished(at=1.5, speech_id="s1")) == (
        fx.CancelToolReply(speech_id="s1"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )
    assert controller.state == "speaking"


HOLD_SECONDS = 3.0
HOLD_TIMER = fx.StartTimer(timer="tool_reply_hold", seconds=HOLD_SECONDS)


def test_the_tool_reply_hold_is_on_by_default() -> None:
    controller = speaking(max_tool_steps=2)
    controller.handle(ev.ToolStepStarted(at=2.0, speech_id="s1"))
    assert controller.handle(ev.UserSpeechStarted(at=2.5)) == (fx.HoldToolReply(speech_id="s1"),)
    assert controller.handle(ev.UserSpeechEnded(at=3.0)) == (HOLD_TIMER,)


def test_no_tool_reply_hold_when_off() -> None:
    """``tool_reply_hold=None``: a barge-in into a tool step holds nothing, and no turn's
    end is judged (LiveKit's own behaviour: the reply to the tool output is asked for at
    once)."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=None)
    controller.handle(SETTINGS)
    controller.handle(ev.ToolStepStarted(at=2.0, speech_id="s1"))
    assert controller.handle(ev.UserSpeechStarted(at=2.5)) == ()
    assert controller.handle(ev.UserSpeechEnded(at=3.0)) == ()
    assert controller.handle(ev.UserTurnEnded(at=3.5, words=1)) == ()
    assert controller.context.held_tool_reply is None


SETTINGS = ev.InterruptionSettings(at=0.0, min_words=3)
"""LiveKit's ``min_words=3``, with an STT."""


def _held(**settings: Any) -> TurnController:
    """A tool step of ``s1`` the caller barged into and stopped speaking over, its reply
    held, under the interruption ``settings`` told to the machine."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.InterruptionSettings(at=0.0, **settings))
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    controller.handle(ev.UserSpeechEnded(at=3.4))
    return controller


def test_a_turn_under_min_words_over_a_held_reply_is_declined_and_sends_it() -> None:
    """LiveKit's end of the turn: one word under ``min_words=3`` is no turn (as LiveKit
    judges one over a playing reply), and the reply goes to the model at once."""
    controller = _held(min_words=3)
    # (the hold's exit, then the turn's action: one step, the levers act at once)
    assert controller.handle(ev.UserTurnEnded(at=3.9, words=2)) == (
        fx.CancelTimer(timer="tool_reply_hold"),
        fx.ReleaseToolReply(speech_id="s1", send=True),
        fx.RejectUserTurn(),
    )
    assert controller.state == "tool_loop"
    assert "reply_free" in controller.configuration
    assert controller.context.held_tool_reply is None


def test_a_turn_of_min_words_over_a_held_reply_is_left_to_livekit() -> None:
    """A real turn: LiveKit commits it and interrupts the step's speech itself, which
    drops the reply; committed without that interruption, the reply goes on."""
    controller = _held(min_words=3)
    assert controller.handle(ev.UserTurnEnded(at=3.9, words=3)) == ()
    assert controller.context.held_tool_reply == "s1"
    assert controller.handle(ev.UserTurnCommitted(at=3.9, text="a b c", item_id="u2")) == (
        fx.CancelTimer(timer="tool_reply_hold"),
        fx.ReleaseToolReply(speech_id="s1", send=True),
    )


@pytest.mark.parametrize(
    "settings",
    [{}, {"min_words": 3, "stt": False}, {"min_words": 3, "manual_turns": True}],
    ids=["min-words-0", "no-stt", "manual-turns"],
)
def test_no_turn_is_too_short_where_livekit_counts_no_words(settings: dict[str, Any]) -> None:
    controller = _held(**settings)
    assert controller.handle(ev.UserTurnEnded(at=3.9, words=1)) == ()
    assert controller.context.held_tool_reply == "s1"


def test_a_turn_ending_without_a_held_reply_is_livekits_alone() -> None:
    controller = speaking(max_tool_steps=2)
    controller.handle(SETTINGS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    assert controller.handle(ev.UserTurnEnded(at=3.9, words=1)) == ()


def test_raw_voice_during_tools_does_not_stop_the_loop() -> None:
    """LiveKit decides whether voice is an interruption (min_words, false interruptions):
    a backchannel that LiveKit does not act on leaves the tool step running; the reply to
    its output is held meanwhile, and sent once the hold runs out."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    assert controller.handle(ev.UserSpeechStarted(at=3.2)) == (fx.HoldToolReply(speech_id="s1"),)
    assert controller.handle(ev.UserSpeechEnded(at=3.4)) == (HOLD_TIMER,)
    assert controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1")) == ()
    assert controller.state == "speaking"
    assert controller.handle(ev.ToolReplyHoldTimerExpired(at=6.4)) == (
        fx.ReleaseToolReply(speech_id="s1", send=True),
    )
    assert controller.context.held_tool_reply is None


def test_the_hold_is_a_region_whose_way_out_sends_or_drops_the_reply() -> None:
    """``reply_held`` beside the turn, in phases: untimed while the caller speaks, timed
    once they stop; its speech's end drops the reply (never asked for)."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    assert controller.configuration[3] == "held_while_caller_speaks"
    controller.handle(ev.UserSpeechEnded(at=3.4))
    assert controller.configuration[3] == "held_after_caller_stops"
    # a second end without a start: the caller stopped once, the timer runs on
    assert controller.handle(ev.UserSpeechEnded(at=3.5)) == ()
    ended = ev.AgentSpeechEnded(at=3.6, speech_id="s1", played_seconds=0.4)
    assert controller.handle(ended)[:2] == (
        fx.CancelTimer(timer="tool_reply_hold"),
        fx.ReleaseToolReply(speech_id="s1", send=False),
    )
    assert controller.configuration[3] == "reply_free"
    assert controller.context.held_tool_reply is None


def test_the_calls_end_leaves_the_hold_without_a_release() -> None:
    """The adapter drops every gate unsent as it detaches: the machine sends nothing."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    effects = controller.handle(ev.CallEnded(at=4.0, reason="hangup"))
    assert not any(isinstance(effect, fx.ReleaseToolReply) for effect in effects)
    assert controller.context.held_tool_reply is None


def test_a_step_of_another_speech_moves_the_step_speech_not_the_hold() -> None:
    """Why ``held_tool_reply`` is kept: under the cap, a step of another speech names the
    tool step's speech anew while the first step's reply is still held."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    controller.handle(ev.AgentSpeechCreated(at=3.3, speech_id="s2"))
    assert controller.handle(ev.ToolStepStarted(at=3.4, speech_id="s2")) == ()
    assert (controller.context.tool_speech_id, controller.context.held_tool_reply) == ("s2", "s1")
    assert controller.handle(ev.UserTurnDeclined(at=3.9, reason="rejected")) == (
        fx.ReleaseToolReply(speech_id="s1", send=True),
    )


def test_a_declined_barge_in_sends_the_held_tool_reply_at_once() -> None:
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    controller.handle(ev.UserSpeechEnded(at=3.4))
    assert controller.handle(ev.UserTurnDeclined(at=3.9, reason="rejected")) == (
        fx.CancelTimer(timer="tool_reply_hold"),
        fx.ReleaseToolReply(speech_id="s1", send=True),
    )


def test_the_caller_speaking_again_holds_on_untimed() -> None:
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    controller.handle(ev.UserSpeechEnded(at=3.4))
    controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1"))
    assert controller.handle(ev.UserSpeechStarted(at=3.6)) == (
        fx.CancelTimer(timer="tool_reply_hold"),
    )
    assert controller.handle(ev.UserSpeechEnded(at=4.0)) == (HOLD_TIMER,)


def test_a_step_that_hands_over_sends_its_held_reply() -> None:
    """The outgoing agent drains (LiveKit takes no user turn meanwhile): nothing would
    decide the hold, and the handoff waits for the held reply."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    assert controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1", hands_over=True)) == (
        fx.ReleaseToolReply(speech_id="s1", send=True),
    )


def test_a_hold_the_adapter_refused_is_forgotten() -> None:
    """LiveKit would not interrupt the speech (its interruptions are off): the adapter
    holds nothing, and the machine waits for no release."""
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    refused = ev.EffectOutcome(at=3.2, effect="hold_tool_reply", outcome="refused", speech_id="s1")
    assert controller.handle(refused) == ()
    assert controller.context.held_tool_reply is None
    assert controller.handle(ev.UserSpeechEnded(at=3.4)) == ()


def test_a_tool_step_starting_while_the_caller_speaks_holds_its_reply() -> None:
    controller = speaking(max_tool_steps=2, tool_reply_hold=HOLD_SECONDS)
    assert controller.handle(ev.UserSpeechStarted(at=2.9)) == ()
    assert controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1")) == (
        fx.HoldToolReply(speech_id="s1"),
    )


def test_no_hold_while_tools_mute_the_caller() -> None:
    controller = speaking(
        max_tool_steps=2, mute_input_during_tools=True, tool_reply_hold=HOLD_SECONDS
    )
    controller.handle(ev.UserSpeechStarted(at=2.9))
    assert controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1")) == (
        fx.MuteInput(hold_audio=False),
    )
    assert controller.handle(ev.UserSpeechStarted(at=3.2)) == ()


def test_livekit_interruption_during_tools_cancels_without_a_final_reply() -> None:
    controller = speaking(tool_reply_hold=HOLD_SECONDS)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.UserSpeechStarted(at=3.2))
    # LiveKit already stopped the speech: nothing to interrupt; its held reply is never sent
    assert controller.handle(ev.AgentSpeechInterrupted(at=3.3, speech_id="s1")) == (
        fx.ReleaseToolReply(speech_id="s1", send=False),
    )
    assert "tool_loop_interrupted" in controller.configuration
    assert controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1")) == (
        fx.CancelToolReply(speech_id="s1"),
    )
    assert controller.state == "speaking"
    assert controller.handle(
        ev.AgentSpeechEnded(at=3.6, speech_id="s1", interrupted=True, played_seconds=0.4)
    ) == (fx.DropUnspokenText(speech_id="s1"),)
    assert controller.state == "listening"


def test_interruption_of_a_speech_not_running_is_ignored() -> None:
    controller = speaking()
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    assert controller.handle(ev.AgentSpeechInterrupted(at=3.3, speech_id="old")) == ()
    assert "tools_open" in controller.configuration


@pytest.mark.parametrize("outcome", ["refused", "failed"])
def test_an_interrupt_that_did_not_happen_lets_the_tool_loop_go_on(outcome: str) -> None:
    controller = speaking(max_tool_steps=2)
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.AgentSpeechInterrupted(at=3.3, speech_id="s1"))
    refused = ev.EffectOutcome(at=3.4, effect="interrupt", outcome=outcome, speech_id="s1")
    assert controller.handle(refused) == ()
    assert "tools_open" in controller.configuration
    # the tool's result is answered: no cancel, and the cap still applies afterwards
    assert controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1")) == ()
    assert tool_round(controller) == (
        fx.CancelToolReply(speech_id="s1"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )


def test_an_interrupt_done_changes_nothing() -> None:
    controller = speaking()
    controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1"))
    controller.handle(ev.AgentSpeechInterrupted(at=3.3, speech_id="s1"))
    assert controller.handle(ev.EffectOutcome(at=3.4, effect="interrupt", outcome="done")) == ()
    assert "tool_loop_interrupted" in controller.configuration


def test_tools_muted_when_the_policy_says_so() -> None:
    controller = speaking(mute_input_during_tools=True)
    assert controller.handle(ev.ToolStepStarted(at=3.0, speech_id="s1")) == (
        fx.MuteInput(hold_audio=False),
    )
    assert controller.handle(ev.ToolStepFinished(at=3.5, speech_id="s1")) == (
        fx.UnmuteInput(replay_held_audio=False),
    )


def test_final_reply_that_plays_nothing_says_the_fallback() -> None:
    controller = speaking(max_tool_steps=1)
    tool_round(controller)
    controller.handle(ev.AgentSpeechEnded(at=3.6, speech_id="s1", played_seconds=1.0))
    assert controller.state == "listening"
    assert (
        controller.handle(ev.AgentSpeechCreated(at=4.0, speech_id="s2", source="tool_reply")) == ()
    )
    assert controller.handle(ev.AgentSpeechEnded(at=4.5, speech_id="s2", played_seconds=0)) == (
        fx.Say(text=FALLBACK, reason="tool_fallback"),
    )


def test_final_reply_that_plays_says_no_fallback() -> None:
    controller = speaking(max_tool_steps=1)
    tool_round(controller)
    controller.handle(ev.AgentSpeechEnded(at=3.6, speech_id="s1", played_seconds=1.0))
    controller.handle(ev.AgentSpeechCreated(at=4.0, speech_id="s2", source="tool_reply"))
    assert controller.handle(ev.AgentSpeechEnded(at=4.5, speech_id="s2", played_seconds=2)) == ()


def test_tool_counters_reset_per_user_turn() -> None:
    controller = speaking(max_tool_steps=1)
    assert tool_round(controller)[-1] == fx.FinalReplyWithoutTools(fallback_text=FALLBACK)
    controller.handle(ev.AgentSpeechEnded(at=3.6, speech_id="s1", played_seconds=1.0))
    assert controller.handle(ev.UserTurnCommitted(at=5.0, text="and now?", item_id="u2")) == ()
    assert controller.context.tool_rounds == 0
    controller.handle(ev.AgentSpeechCreated(at=5.1, speech_id="s3"))
    assert controller.handle(ev.ToolStepStarted(at=5.2, speech_id="s3")) == ()  # let through
    assert controller.handle(ev.ToolStepFinished(at=5.3, speech_id="s3")) == (
        fx.CancelToolReply(speech_id="s3"),
        fx.FinalReplyWithoutTools(fallback_text=FALLBACK),
    )


# -- timers that end the call --------------------------------------------------------------


def test_idle_reprompts_then_hangs_up() -> None:
    controller = listening(idle_timeout=5, idle_max_reprompts=2, idle_message="Still there?")
    at = 0.0
    for number in (1, 2):
        at += 5
        assert controller.handle(ev.IdleTimerExpired(at=at)) == (
            fx.Say(text="Still there?", reason="reprompt"),
            fx.StartTimer(timer="idle", seconds=5),  # should no speech come of the say
        )
        assert controller.context.reprompts == number
        assert controller.handle(ev.AgentSpeechCreated(at=at, speech_id=f"r{number}")) == (
            fx.CancelTimer(timer="idle"),
        )
        assert controller.handle(
            ev.AgentSpeechEnded(at=at + 1, speech_id=f"r{number}", played_seconds=1)
        ) == (fx.StartTimer(timer="idle", seconds=5),)
    assert controller.handle(ev.IdleTimerExpired(at=at + 6)) == (fx.EndCall(reason="idle"),)
    assert controller.state == "ended"


def test_idle_reprompts_reset_when_the_caller_speaks() -> None:
    controller = listening(idle_timeout=5, idle_max_reprompts=1)
    controller.handle(ev.IdleTimerExpired(at=5))
    controller.handle(ev.UserTurnCommitted(at=6, text="yes", item_id="u1"))
    assert controller.context.reprompts == 0


def test_no_reprompt_allowed_hangs_up_at_the_first_idle_timeout() -> None:
    controller = listening(idle_timeout=5, idle_max_reprompts=0, max_call_duration=60)
    assert controller.handle(ev.IdleTimerExpired(at=5)) == (
        fx.CancelTimer(timer="max_duration"),
        fx.EndCall(reason="idle"),
    )


@pytest.mark.parametrize("where", ["listening", "speaking", "tool_loop"])
def test_max_call_duration_ends_the_call(where: str) -> None:
    controller = speaking(max_call_duration=60, idle_timeout=5, mute_input_during_tools=True)
    if where == "tool_loop":
        controller.handle(ev.ToolStepStarted(at=2, speech_id="s1"))
    elif where == "listening":
        controller.handle(ev.AgentSpeechEnded(at=2, speech_id="s1", played_seconds=1))
    assert controller.state == where
    effects = controller.handle(ev.MaxDurationTimerExpired(at=60))
    expected: tuple[fx.Effect, ...] = (fx.EndCall(reason="max_duration"),)
    if where == "listening":
        expected = (fx.CancelTimer(timer="idle"), *expected)
    if where == "tool_loop":
        expected = (fx.UnmuteInput(), *expected)
    assert effects == expected
    assert controller.state == "ended"


def test_max_call_duration_in_the_greeting_releases_the_lock() -> None:
    controller = greeted(outbound(max_call_duration=30, greeting_lock="mute_input"))
    assert controller.handle(ev.MaxDurationTimerExpired(at=30)) == (
        fx.UnmuteInput(replay_held_audio=False),
        fx.EndCall(reason="max_duration"),
    )


# -- answering machines and errors ---------------------------------------------------------


def test_answering_machine_hang_up() -> None:
    controller = outbound()
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.handle(ev.AnsweringMachineDetected(at=1.0, result="human")) == ()
    assert controller.handle(ev.AnsweringMachineDetected(at=1.0, result="machine")) == (
        fx.CancelTimer(timer="await_user"),
        fx.EndCall(reason="answering_machine"),
    )
    assert controller.state == "ended"


def test_answering_machine_continue() -> None:
    controller = outbound(on_answering_machine="continue")
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.handle(ev.AnsweringMachineDetected(at=1.0, result="machine")) == ()
    assert controller.state == "awaiting_user"


def test_session_errors() -> None:
    controller = speaking()
    assert controller.handle(ev.SessionError(at=2.0, message="tts hiccup")) == ()
    assert controller.state == "speaking"
    assert controller.handle(ev.SessionError(at=2.0, message="llm down", recoverable=False)) == (
        fx.EndCall(reason="error"),
    )
    assert controller.state == "ended"


# -- hang-up from every state --------------------------------------------------------------

HANG_UP_POLICY = {
    "greeting_lock": "mute_input",
    "mute_input_during_tools": True,
    "idle_timeout": 5,
    "max_call_duration": 600,
}


def to_state(state: str, **options: Any) -> TurnController:
    """A controller driven by real events into ``state``, holding every lever it can."""
    controller = outbound(**{**HANG_UP_POLICY, **options})
    path: list[ev.Event] = []
    if state != "ringing":
        path.append(ev.CallAnswered(at=0.0))
    if state in ("greeting", "listening", "speaking", "tool_loop"):
        path += [
            ev.UserTurnCommitted(at=1.0, text="Hello?", item_id="u1"),
            ev.AgentSpeechCreated(at=1.1, speech_id="g1", source="say"),
        ]
    if state == "listening" and options.get("greeting_overlap") == "drop":
        path.append(ev.UserSpeechStarted(at=2.5))  # still speaking when the greeting ends
    if state in ("listening", "speaking", "tool_loop"):
        path.append(ev.AgentSpeechEnded(at=3.0, speech_id="g1", played_seconds=2))
    if state in ("speaking", "tool_loop"):
        path.append(ev.AgentSpeechCreated(at=4.0, speech_id="s1"))
    if state == "tool_loop":
        path.append(ev.ToolStepStarted(at=5.0, speech_id="s1"))
    for event in path:
        controller.handle(event)
    assert controller.state == state
    return controller


NON_FINAL = ["ringing", "awaiting_user", "greeting", "listening", "speaking", "tool_loop"]


@pytest.mark.parametrize("overlap", ["answer_whole", "drop"])
@pytest.mark.parametrize("lock", ["mute_input", "keep_listening"])
@pytest.mark.parametrize("state", NON_FINAL)
def test_hang_up_from_every_state_only_cleans_up(state: str, lock: str, overlap: str) -> None:
    controller = to_state(state, greeting_lock=lock, greeting_overlap=overlap)
    if state == "listening" and lock == "keep_listening" and overlap == "drop":
        assert controller.configuration[0] == "discarding_overlap"  # an overlap goes on
    running = controller.running_timers
    released = input_muted(controller.policy, {controller.state}), held(controller)
    effects = controller.handle(ev.CallEnded(at=9.0, reason="hangup"))
    assert controller.state == "ended"
    assert all(isinstance(effect, CLEANUP_EFFECTS) for effect in effects), effects
    assert effects[-1] == fx.EndCall(reason="hangup")
    assert {e.timer for e in effects if isinstance(e, fx.CancelTimer)} == running
    assert (fx.UnmuteInput() in effects, fx.ResumeUserTurns() in effects) == released
    assert not controller.running_timers


def test_hang_up_inside_a_muted_greeting_releases_without_replay() -> None:
    """The greeting's exit unmutes (its way out is the hang-up: no replay), before the
    turn's exit cancels the call's timer."""
    controller = to_state("greeting", greeting_lock="mute_input", greeting_overlap="answer_whole")
    assert controller.handle(ev.CallEnded(at=9.0, reason="room_closed")) == (
        fx.UnmuteInput(replay_held_audio=False),
        fx.CancelTimer(timer="max_duration"),
        fx.EndCall(reason="room_closed"),
    )


@pytest.mark.parametrize("state", NON_FINAL)
def test_nothing_after_the_end(state: str) -> None:
    controller = to_state(state)
    controller.handle(ev.CallEnded(at=9.0))
    for event in event_alphabet():
        assert controller.handle(event) == (), event
        assert controller.state == "ended"


# -- a realtime model's events on a pipeline ---------------------------------------------

MODEL_EVENTS = (
    ev.ModelResponseCreated(at=0.5, response_id="r1"),
    ev.ModelResponseDone(at=0.5, response_id="r1"),
    ev.ModelCancelSent(at=0.5, cancel_id="c1", response_id="r1"),
    ev.ModelCancelAnswered(at=0.5, cancel_id="c1"),
    ev.ModelReplyStarted(at=0.5, speech_id="s1"),
    ev.ModelReplyStarted(at=0.5, speech_id="s1", after_tool_output=True),
)


def test_a_realtime_models_events_change_nothing_on_a_pipeline() -> None:
    """The adapter reports a realtime model's events only from the model's link. A
    pipeline told of one anyway (an embedder's own adapter, a stray event) changes
    nothing, in any state a call passes through: before, the greeting waited for the
    response of a model the call does not have, and started without the callee's first
    words (I7; found by the hypothesis state machine)."""
    policy = TurnPolicy(first_speaker="user", greeting="Hi", max_tool_steps=1)
    call = [
        ev.SessionStarted(at=1.0),
        ev.UserTranscript(at=1.5, text="Hello?", is_final=True),
        ev.AgentSpeechCreated(at=1.6, speech_id="s1", source="reply"),
        ev.AgentSpeechEnded(at=3.0, speech_id="s1"),
        ev.UserTurnCommitted(at=4.0, text="When do you open?", item_id="u2"),
        ev.AgentSpeechCreated(at=4.1, speech_id="s2", source="reply"),
        ev.ToolStepStarted(at=4.2, speech_id="s2", calls=1),
    ]
    controller = TurnController(policy, strict=True, keep_text=True)
    controller.handle(ev.InterruptionSettings(at=0.0, min_words=0))
    visited = []
    for next_event in (*call, None):
        before = controller.snapshot()
        visited.append(controller.state)
        for stray in MODEL_EVENTS:
            assert controller.handle(stray) == (), (controller.state, stray)
            assert controller.snapshot() == before, (controller.state, stray)
        if next_event is not None:
            controller.handle(next_event)
    assert visited == [
        "start", "awaiting_user", "greeting", "greeting", "listening", "listening",
        "speaking", "tool_loop",
    ]  # fmt: skip
    # the call goes on as if nothing had been said: the greeting carries the first words
    replay = TurnController(policy, strict=True, keep_text=True)
    replay.handle(ev.InterruptionSettings(at=0.0, min_words=0))
    replay.handle(ev.ModelResponseCreated(at=0.5, response_id="r1"))
    replay.handle(ev.SessionStarted(at=1.0))
    effects = replay.handle(ev.UserTranscript(at=1.5, text="Hello?", is_final=True))
    (greeting,) = [e for e in effects if isinstance(e, fx.StartGreeting)]
    assert greeting.first_words == "Hello?"
