"""The translator: LiveKit's objects made machine events, as plain functions.

Each function reads one LiveKit object (an event of the session, a speech handle, a chat
message) and returns the :mod:`turnfsm.events` event it means, stamped ``at``; none keeps
state or dispatches. What the adapter must remember between LiveKit's events (which
speech ran a tool call, what a speech played) it keeps itself and hands in. A session
event that needs nothing else is in :data:`TRANSLATIONS`, which the adapter subscribes
to as it is: adding one is one function and one row here. The session events the adapter
does not subscribe to are in :data:`IGNORED_SESSION_EVENTS`, each with why (a test holds
LiveKit's list of events to the two, and the table below to the machine's events).

==============================================  ============================================
LiveKit                                          turnfsm event
==============================================  ============================================
``agent_state_changed`` from ``initializing``,   ``SessionStarted`` (and the audio links are
or the first ``speech_created`` (an              put in place), once
``on_enter`` speech comes first)
``agent_state_changed`` to ``speaking``          ``AgentSpeechStarted``
``user_state_changed`` to / from ``speaking``    ``UserSpeechStarted`` / ``UserSpeechEnded``
``user_input_transcribed``                       ``UserTranscript``
the session's ``interruption`` options and STT   ``InterruptionSettings``, once, before
                                                 ``SessionStarted``
LiveKit's end of the caller's turn, before it    ``UserTurnEnded`` (its words counted as for
decides (``on_end_of_turn`` of an activity that  ``min_words``); a ``RejectUserTurn`` of its
ran a tool step: :class:`~.interruption.         step makes it no turn, as LiveKit's
TurnEndWatch`)                                   ``min_words`` does
``TurnAgent.on_user_turn_completed``             ``UserTurnCommitted`` (without ``TurnAgent``:
                                                 ``conversation_item_added``, role user)
``generate_reply(user_input=...)`` (a typed       ``UserTurnCommitted``, before the reply is
turn: ``session.run``, RoomIO's text input)      created (:mod:`.text_turns`)
no reply to it: ``StopResponse`` (rejected by    ``UserTurnDeclined``, naming the reply
the machine) or the agent's own hook raised      LiveKit prepared for the turn
                                                 (``preemptive_generation``) and leaves
                                                 parked: the one speech not scheduled
``agent_false_interruption``                     ``UserTurnDeclined`` (``false_interruption``)
``speech_created``                               ``AgentSpeechCreated``
speech handle interrupted (``speech_handle.``   ``AgentSpeechInterrupted`` (before its
``wait_if_not_interrupted``)                     ``AgentSpeechEnded``)
speech handle done                               ``AgentSpeechEnded`` (played seconds from
                                                 :class:`~.audio.PlayoutMeter`; a text-only
                                                 session's, its text's at LiveKit's rate)
``conversation_item_added``, role assistant      ``AssistantMessageCommitted`` (an interrupted
                                                 reply in full: the text
                                                 ``TurnAgent.transcription_node`` forwarded,
                                                 also behind a transcript synchronizer)
``conversation_item_added``, agent handoff     (no event: the held or released user turns
                                                 are put on the new agent's activity)
``tool_execution_updated`` (first call started)  ``ToolStepStarted`` (of the speech running
                                                 then; calls tracked by id)
``function_tools_executed``                      ``ToolStepFinished`` (of its calls' speech;
                                                 ``hands_over``: ``has_agent_handoff``)
timer expiry (``loop.call_later``)               the timer's ``*TimerExpired``
``error``                                        ``SessionError`` (``recoverable`` as given)
``close``                                        ``CallEnded``
every lever (and the futures it started)         ``EffectOutcome``
a failed outcome check (:mod:`.outcomes`)        ``OutcomeBreached`` (into the trace only)
SIP ``sip.callStatus`` (:mod:`.sip`)             ``CallRinging`` / ``CallAnswered`` /
                                                 ``CallEnded``
AMD ``amd_prediction`` (:meth:`watch_amd`)       ``AnsweringMachineDetected``
a realtime model's own replies, responses and    ``RealtimeModelLinked``, ``ModelReplyStarted``,
refusals, cancels (:mod:`.realtime`)             ``ModelResponseCreated`` /
                                                 ``ModelResponseDone``, ``ModelCancelSent``
                                                 / ``ModelCancelAnswered``,
                                                 ``EffectOutcome``
==============================================  ============================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

from livekit.agents import AgentSession, llm, utils
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import (
    CloseEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
)

from turnfsm import events as ev

from .interruption import TurnEnd


def user_speech(event: UserStateChangedEvent, at: float) -> ev.Event | None:
    """The caller starts or stops speaking (``user_state_changed``); ``None`` otherwise."""
    if event.new_state == "speaking":
        return ev.UserSpeechStarted(at=at)
    if event.old_state == "speaking":
        return ev.UserSpeechEnded(at=at)
    return None


def transcript(event: UserInputTranscribedEvent, at: float) -> ev.UserTranscript:
    """A transcript of the caller's words (``user_input_transcribed``)."""
    return ev.UserTranscript(at=at, text=event.transcript, is_final=event.is_final)


def user_turn(message: llm.ChatMessage, at: float) -> ev.UserTurnCommitted:
    """A user message committed as a turn (a hook's, a typed one, a server-committed one)."""
    return ev.UserTurnCommitted(at=at, text=message.text_content or "", item_id=message.id)


def assistant_message(
    message: llm.ChatMessage, speech_id: str, at: float, *, cut_short: bool
) -> ev.AssistantMessageCommitted:
    """An assistant message LiveKit committed for ``speech_id``; ``cut_short``: a
    realtime reply whose audio the model cut (a failed or cancelled response, a lost
    connection) is cut as an interrupted one."""
    return ev.AssistantMessageCommitted(
        at=at,
        item_id=message.id,
        speech_id=speech_id,
        text=message.text_content or "",
        interrupted=message.interrupted or cut_short,
    )


def speech_created(
    event: SpeechCreatedEvent, at: float, *, from_agent_code: bool
) -> ev.AgentSpeechCreated:
    """A speech LiveKit created (``speech_created``): said, or a reply."""
    source: Literal["say", "reply"] = "say" if event.source == "say" else "reply"
    return ev.AgentSpeechCreated(
        at=at,
        speech_id=event.speech_handle.id,
        source=source,
        from_agent_code=from_agent_code,
    )


def speech_ended(handle: SpeechHandle, at: float, *, played_seconds: float) -> ev.AgentSpeechEnded:
    """A speech handle is done, with what of it played."""
    return ev.AgentSpeechEnded(
        at=at,
        speech_id=handle.id,
        interrupted=handle.interrupted,
        played_seconds=played_seconds,
    )


def speech_interrupted(speech_id: str, at: float) -> ev.AgentSpeechInterrupted:
    """LiveKit really interrupted the speech (:class:`~.interruption.InterruptionWatch`)."""
    return ev.AgentSpeechInterrupted(at=at, speech_id=speech_id)


def tool_step_finished(
    event: FunctionToolsExecutedEvent, speech_id: str, at: float
) -> ev.ToolStepFinished:
    """A tool step's calls ran (``function_tools_executed``), of ``speech_id``'s step."""
    return ev.ToolStepFinished(
        at=at,
        speech_id=speech_id,
        calls=tool_calls(event),
        hands_over=event.has_agent_handoff,
    )


def tool_calls(event: FunctionToolsExecutedEvent) -> int:
    """How many calls a finished step ran (at least one)."""
    return max(1, len(event.function_calls))


def turn_declined(
    reason: ev.TurnDeclineReason, item_id: str, speeches: Iterable[SpeechHandle], at: float
) -> ev.UserTurnDeclined:
    """LiveKit will not answer the caller, with the reply it prepared for the turn, which
    it leaves parked: the one speech of ``speeches`` not scheduled (LiveKit schedules
    every other as it creates it)."""
    prepared = [handle.id for handle in speeches if not handle.done() and not handle.scheduled]
    return ev.UserTurnDeclined(
        at=at,
        reason=reason,
        item_id=item_id,
        prepared_speech_id=prepared[-1] if prepared else "",
    )


def turn_ended(turn_end: TurnEnd, at: float) -> ev.UserTurnEnded:
    """LiveKit ends the caller's turn, its words counted as for ``min_words``."""
    return ev.UserTurnEnded(at=at, words=turn_end.words)


def session_error(event: ErrorEvent, at: float) -> ev.SessionError:
    """The session's ``error`` (its type's name only: the message may quote the call)."""
    error = event.error
    return ev.SessionError(
        at=at,
        message=type(error).__name__,
        recoverable=bool(getattr(error, "recoverable", True)),
    )


TRANSLATIONS: dict[str, Callable[[Any, float], ev.Event]] = {
    "error": session_error,
}
"""The session events translated as they come, by LiveKit's event name: the adapter
subscribes to each and dispatches what it returns."""

IGNORED_SESSION_EVENTS: dict[str, str] = {
    "user_transcription_timeout": "emitted only with the session's transcription_timeout"
    " (off by default), after speech no final transcript followed: no turn was committed,"
    " so nothing is asked of the machine (the caller's speech start and end were seen)",
    "overlapping_speech": "adaptive interruption detection's verdict on speech over the"
    " agent: LiveKit acts on it itself, and the machine sees what it did (the speech"
    " interrupted, the turn committed or declined)",
    "metrics_collected": "deprecated by LiveKit 1.8 for session_usage_updated; the call's"
    " turn metrics come from the trace (turnfsm.tools.metrics)",
    "session_usage_updated": "the models' usage (tokens, characters, seconds): no turn-taking"
    " fact",
    "debug_message": "LiveKit's internal payloads for its debugger and recorder",
}
"""LiveKit's ``AgentSession`` events the adapter does not subscribe to, each with why: a
test holds every event of LiveKit's ``EventTypes`` to be subscribed or named here, so an
event a new LiveKit brings cannot pass unseen."""


def call_ended(event: CloseEvent, at: float) -> ev.CallEnded:
    """The session closed."""
    return ev.CallEnded(at=at, reason=str(event.reason.value))


def interruption_settings(session: AgentSession, at: float) -> ev.InterruptionSettings:
    """The session's interruption settings, as LiveKit reads them at a turn's end: its
    ``min_words``, and whether the running agent hears through an STT (LiveKit counts
    words only then) and its turn detection is manual (then it counts none)."""
    options = session.options.interruption
    agent = session.current_agent
    stt = agent.stt if utils.is_given(agent.stt) else session.stt
    turn_detection = (
        agent.turn_detection if utils.is_given(agent.turn_detection) else session.turn_detection
    )
    return ev.InterruptionSettings(
        at=at,
        min_words=int(options["min_words"]),
        stt=stt is not None,
        manual_turns=turn_detection == "manual",
    )
