"""The turn machine: every state and transition of a call, declared in one class.

The class names its guards and actions; their code lives in
:class:`turnfsm.rules.TurnRules`, attached as a listener. Nothing here performs I/O:
actions append :mod:`turnfsm.effects` to an outbox that the controller returns.

Reading the declaration: ``event = source.to(target, cond=..., on=...)`` — the first
transition (in declaration order) whose guards hold wins. ``internal=True`` stays in
the state without running its exit and enter actions.

Events that a state does not list are ignored there on purpose; :data:`IGNORED` says
why for each, and the test suite checks that every (state, event) pair is either a
transition or listed there.
"""

from __future__ import annotations

from statemachine import State, StateChart


class TurnMachine(StateChart):
    """A voice call's turns: ``ringing → awaiting_user → greeting → listening ⇄ speaking ⇄
    tool_loop``, and ``ended`` from anywhere."""

    catch_errors_as_events = False
    """An exception in an action is a bug: it must reach the caller, never be swallowed."""

    allow_event_without_transition = True
    """Events a state does not handle are ignored (see :data:`IGNORED`), never an error."""

    enable_self_transition_entries = False
    """Self transitions are declared internal; none re-runs enter or exit actions."""

    atomic_configuration_update = True
    """The state changes once per step, after exit and before enter actions."""

    ringing = State(initial=True)
    """Outbound only: dialing, until the callee picks up."""

    awaiting_user = State(enter="start_await_timer", exit="cancel_await_timer")
    """Answered; waiting for the callee's first words before greeting."""

    greeting = State(enter="begin_greeting", exit="release_greeting_lock")
    """The locked greeting: nothing the caller says interrupts it."""

    listening = State(
        enter="start_idle_timer",
        exit=["cancel_idle_timer", "close_spill_over_window", "stop_discarding_overlap"],
    )
    """The caller's turn."""

    speaking = State()
    """The agent's turn: a reply is being generated or played."""

    tool_loop = State(enter="mute_for_tools", exit="unmute_after_tools")
    """The reply runs a tool step; capped at ``max_tool_steps`` per user turn."""

    ended = State(final=True, enter="clean_up_call")
    """The call is over; only clean-up effects are emitted on the way in."""

    session_started = (
        greeting.to.itself(internal=True, cond="not_started", on=["begin_call", "begin_greeting"])
        | awaiting_user.to.itself(
            internal=True, cond="not_started", on=["begin_call", "start_await_timer"]
        )
        | listening.to.itself(
            internal=True, cond="not_started", on=["begin_call", "start_idle_timer"]
        )
    )

    call_ringing = ringing.to.itself(internal=True)

    call_answered = ringing.to(greeting, cond="agent_speaks_first", on="begin_call") | ringing.to(
        awaiting_user, on="begin_call"
    )

    call_ended = ended.from_(
        ringing, awaiting_user, greeting, listening, speaking, tool_loop, on="note_end_reason"
    )

    user_speech_started = (
        awaiting_user.to.itself(internal=True, on=["note_user_speaking", "cancel_await_timer"])
        | greeting.to.itself(internal=True, on=["note_user_speaking", "note_overlap"])
        | listening.to.itself(
            internal=True,
            cond="in_spill_over_window",
            on=["note_user_speaking", "cancel_idle_timer", "hold_spill_over"],
        )
        | listening.to.itself(internal=True, on=["note_user_speaking", "cancel_idle_timer"])
        | speaking.to.itself(internal=True, on="note_user_speaking")
        | tool_loop.to.itself(internal=True, on="note_user_speaking")
    )

    agent_speech_interrupted = tool_loop.to.itself(
        internal=True, cond="is_active_speech", on="note_tool_loop_interrupted"
    )

    effect_outcome = (
        tool_loop.to.itself(
            internal=True,
            cond=["interrupt_not_done", "tool_loop_is_stopped"],
            on="resume_tool_loop",
        )
        | greeting.to.itself(
            internal=True,
            cond=["greeting_start_not_done", "has_greeting_text"],
            unless="greeting_retried",
            on="say_greeting_locked",
        )
        | greeting.to(ended, cond="greeting_start_not_done", on="note_greeting_failed")
        | greeting.to(ended, cond="greeting_retry_not_done", on="note_greeting_failed")
    )

    user_speech_ended = (
        awaiting_user.to.itself(internal=True, on=["note_user_silent", "start_await_timer"])
        | listening.to.itself(
            internal=True,
            cond="discarding_overlap",
            on=["note_user_silent", "discard_overlap", "start_idle_timer"],
        )
        | listening.to.itself(internal=True, on=["note_user_silent", "start_idle_timer"])
        | greeting.to.itself(internal=True, on="note_user_silent")
        | speaking.to.itself(internal=True, on="note_user_silent")
        | tool_loop.to.itself(internal=True, on="note_user_silent")
    )

    user_turn_committed = (
        ringing.to(greeting, on=["begin_call", "note_first_words", "note_user_turn"])
        | awaiting_user.to(greeting, on=["note_first_words", "note_user_turn"])
        | greeting.to.itself(
            internal=True, cond="drops_overlap", unless="is_first_words", on="reject_user_turn"
        )
        | listening.to.itself(internal=True, on="note_user_turn")
        | speaking.to.itself(internal=True, on="note_user_turn")
        | tool_loop.to.itself(internal=True, on="note_user_turn")
    )

    agent_speech_created = (
        ringing.to.itself(internal=True, on="stop_early_speech")
        | awaiting_user.to.itself(internal=True, on="stop_early_speech")
        | greeting.to.itself(internal=True, cond="greeting_speech_pending", on="lock_greeting")
        | listening.to(speaking, on="note_speech")
        | speaking.to.itself(internal=True, on="note_speech")
        | tool_loop.to.itself(internal=True, on="note_speech")
    )

    agent_speech_ended = (
        greeting.to(listening, cond="is_greeting_speech", on="note_speech_end")
        | speaking.to(listening, cond="is_last_active_speech", on="note_speech_end")
        | tool_loop.to(listening, cond="is_last_active_speech", on="note_speech_end")
        | ringing.to.itself(internal=True, on="note_speech_end")
        | awaiting_user.to.itself(internal=True, on="note_speech_end")
        | greeting.to.itself(internal=True, on="note_speech_end")
        | listening.to.itself(internal=True, on="note_speech_end")
        | speaking.to.itself(internal=True, on="note_speech_end")
        | tool_loop.to.itself(internal=True, on="note_speech_end")
    )

    assistant_message_committed = (
        greeting.to.itself(internal=True, cond="needs_drop", on="drop_unspoken_text")
        | listening.to.itself(internal=True, cond="needs_drop", on="drop_unspoken_text")
        | speaking.to.itself(internal=True, cond="needs_drop", on="drop_unspoken_text")
        | tool_loop.to.itself(internal=True, cond="needs_drop", on="drop_unspoken_text")
    )

    tool_step_started = (
        listening.to(tool_loop, on="count_tool_round")
        | speaking.to(tool_loop, on="count_tool_round")
        | tool_loop.to.itself(internal=True, on="count_tool_round")
    )

    tool_step_finished = (
        tool_loop.to(speaking, cond="tool_loop_must_stop", on="stop_after_tool_step")
        | tool_loop.to(speaking)
        | listening.to.itself(internal=True, cond="tool_loop_must_stop", on="stop_after_tool_step")
        | speaking.to.itself(internal=True, cond="tool_loop_must_stop", on="stop_after_tool_step")
    )

    timer_fired = (
        ended.from_(
            awaiting_user,
            greeting,
            listening,
            speaking,
            tool_loop,
            cond=["timer_is_running", "is_max_duration_timer"],
            before="note_timer_fired",
            on="note_max_duration",
        )
        | awaiting_user.to(
            greeting,
            cond=["timer_is_running", "is_await_timer", "greets_silent_callee"],
            before="note_timer_fired",
        )
        | awaiting_user.to(
            ended,
            cond=["timer_is_running", "is_await_timer"],
            before="note_timer_fired",
            on="note_no_answer",
        )
        | listening.to.itself(
            internal=True,
            cond=["timer_is_running", "is_idle_timer", "can_reprompt"],
            before="note_timer_fired",
            on="reprompt",
        )
        | listening.to(
            ended,
            cond=["timer_is_running", "is_idle_timer"],
            before="note_timer_fired",
            on="note_idle_hang_up",
        )
    )

    answering_machine_detected = ended.from_(
        ringing,
        awaiting_user,
        greeting,
        listening,
        speaking,
        tool_loop,
        cond=["machine_answered", "hangs_up_on_machine"],
        on="note_answering_machine",
    )

    session_error = ended.from_(
        ringing,
        awaiting_user,
        greeting,
        listening,
        speaking,
        tool_loop,
        unless="error_is_recoverable",
        on="note_session_error",
    )


LOCKED_STATES: frozenset[str] = frozenset({"greeting"})
"""States drawn and checked as locked: no interrupt effect is ever emitted in them."""

IGNORED: dict[str, str] = {
    "session_started": "outbound calls start on call_answered; a second start is a duplicate",
    "call_ringing": "informational once the call is answered",
    "call_answered": "the call is already answered (duplicate or inbound)",
    "call_ended": "the call has already ended",
    "user_speech_started": "before the answer nobody is on the line",
    "user_speech_ended": "before the answer nobody is on the line",
    "user_transcript": "transcripts are traced only; turns are decided on commit",
    "user_turn_committed": "a turn inside the greeting is answered after it (answer_whole)",
    "agent_speech_created": "a second speech in the greeting waits its turn behind it",
    "agent_speech_started": "playback is traced only; the state follows creation and end",
    "agent_speech_ended": "the call has already ended",
    "assistant_message_committed": "nothing to drop: not interrupted, policy keep, or done",
    "tool_step_started": "tools inside the greeting or after the end are not a user turn",
    "tool_step_finished": "the tool step is within the cap, or the call has ended",
    "timer_fired": "a cancelled timer's late expiry, or a timer of another state",
    "answering_machine_detected": "a human answered, or the policy continues on machines",
    "session_error": "recoverable errors are traced only",
    "agent_speech_interrupted": "only a tool step needs it; a reply's end follows as"
    " agent_speech_ended, a greeting is locked, and before the greeting the machine"
    " interrupted the speech itself",
    "effect_outcome": "a done outcome, or a refusal the machine has no other way to act on"
    " (see OUTCOME_DECISIONS): traced only",
}
"""Why an event is ignored where the machine declares no transition for it."""

OUTCOME_DECISIONS: dict[str, str] = {
    "mute_input": "traced only: the outcome monitor reports caller audio heard in a lock",
    "unmute_input": "traced only: the outcome monitor reports input left muted",
    "lock_speech": "traced only: the outcome monitor reports an unlocked greeting",
    "start_greeting": "in greeting, before its speech exists: said again once as a locked"
    " Say of the fixed text; a generated greeting, or a second failure, ends the call"
    " (greeting_failed), never a deaf greeting",
    "hold_user_turns": "traced only: the outcome monitor reports a reply to an overlap",
    "resume_user_turns": "traced only: the outcome monitor reports a deaf agent",
    "interrupt": "in tool_loop after LiveKit's interruption: the loop goes on (its"
    " reply is spoken); before the greeting traced only: the outcome monitor reports"
    " agent audio before the greeting",
    "drop_unspoken_text": "traced only: the outcome monitor compares history and audio",
    "clear_user_turn": "traced only: the next turn may carry the overlap's words",
    "reject_user_turn": "traced only: the outcome monitor reports a reply to an overlap",
    "cancel_tool_reply": "traced only: the outcome monitor counts tool rounds",
    "final_reply_without_tools": "traced only: the next user turn starts a fresh count",
    "start_timer": "traced only: the timer never fires, the call goes on without it",
    "cancel_timer": "traced only: a late expiry is stale and ignored",
    "say": "in greeting, the retried greeting failed too: the call ends"
    " (greeting_failed); a re-prompt or fallback is traced only",
    "end_call": "traced only: the session's close still ends the call (call_ended)",
}
"""What the machine does when a lever reports an effect ``refused`` or ``failed``
(``effect_outcome``); a ``done`` outcome is traced only. A test checks every effect
is listed."""
