"""Inputs of the turn machine: what happened on the call, as frozen data.

Every event carries ``at``, the time in seconds on the caller's clock (the adapter
uses the event loop's clock, a simulation its own). The machine never reads a clock:
time enters only here, so a trace replays to the same effects.

Each class maps to one machine event, named by its ``name`` class attribute.

Every field is checked when an event is built (:func:`turnfsm.fields.check_fields`):
times are finite seconds >= 0, ids and text are strings, flags are real booleans. A bad
value raises before the event exists, naming the class and the field, so nothing
downstream (the machine, a trace, a picture) ever sees it.

>>> UserTurnCommitted(at=2.0, text=42)
Traceback (most recent call last):
...
TypeError: UserTurnCommitted.text must be a string, got 42
>>> AgentSpeechEnded(at=3.0, speech_id="s1", interrupted="no")
Traceback (most recent call last):
...
TypeError: AgentSpeechEnded.interrupted must be True or False, got 'no'
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from .effects import EFFECTS_BY_NAME, TimerName
from .fields import Label, Text, check_fields, show

SpeechSource = Literal["say", "reply", "tool_reply"]
"""Where an agent speech came from: ``session.say``, a reply, or a reply after tools."""

AnsweringMachineResult = Literal["human", "machine"]

EffectOutcomeKind = Literal["done", "refused", "failed"]
"""What a lever did with an effect: ``done``, ``refused`` by LiveKit, or ``failed`` (raised)."""

TurnDeclineReason = Literal["false_interruption", "rejected", "stopped_by_agent"]
"""Why the caller's speech got no reply: a false interruption (LiveKit resumed the agent),
rejected by the machine, or stopped by the agent's own ``on_user_turn_completed``. (A
turn too short to interrupt, ``min_words``, is declined before LiveKit commits it:
``UserTurnEnded``.)"""

OutcomeCheck = Literal["O1", "O2", "O3", "O4", "O5", "O6", "O7"]
"""The outcome monitor's checks (``turnfsm.adapters.livekit.outcomes.OUTCOME_CHECKS``)."""


def _seconds(value: object) -> object:
    """An integer number of seconds as a float; anything else is left to the checks."""
    return float(value) if type(value) is int else value


@attrs.frozen
class Event:
    """Base of every input; ``at`` is seconds on the caller's clock."""

    name: ClassVar[str] = ""
    at: float = attrs.field(converter=_seconds, kw_only=True)

    def __attrs_post_init__(self) -> None:
        check_fields(self)


@attrs.frozen
class SessionStarted(Event):
    """The agent session is running; an inbound call is answered from here on."""

    name: ClassVar[str] = "session_started"


@attrs.frozen
class CallRinging(Event):
    """The callee's phone rings (SIP ``sip.callStatus`` ``dialing``/``ringing``)."""

    name: ClassVar[str] = "call_ringing"


@attrs.frozen
class CallAnswered(Event):
    """The callee picked up (SIP ``sip.callStatus`` became ``active``)."""

    name: ClassVar[str] = "call_answered"


@attrs.frozen
class CallEnded(Event):
    """The call is over: the callee hung up, the room closed or the session closed."""

    name: ClassVar[str] = "call_ended"
    reason: Label = "hangup"


@attrs.frozen
class UserSpeechStarted(Event):
    """Voice activity started (VAD)."""

    name: ClassVar[str] = "user_speech_started"


@attrs.frozen
class UserSpeechEnded(Event):
    """Voice activity ended (VAD)."""

    name: ClassVar[str] = "user_speech_ended"


@attrs.frozen
class UserTranscript(Event):
    """Speech-to-text output for the user's current turn."""

    name: ClassVar[str] = "user_transcript"
    text: Text = ""
    is_final: bool = False


@attrs.frozen
class UserTurnCommitted(Event):
    """The user's turn ended and was committed as a chat item."""

    name: ClassVar[str] = "user_turn_committed"
    text: Text = ""
    item_id: Label = ""


@attrs.frozen
class UserTurnEnded(Event):
    """LiveKit's end of the caller's turn (its end-of-turn decision), before it decides
    whether the turn commits: the point where it applies ``min_words`` to a playing reply.
    A turn the machine declines here (``RejectUserTurn``) is no turn, as LiveKit's own
    ``min_words`` makes it: not committed, its words kept for the caller's next turn."""

    name: ClassVar[str] = "user_turn_ended"
    words: int = 0
    """The turn's transcript counted as LiveKit counts it for ``min_words``."""


@attrs.frozen
class UserTurnDeclined(Event):
    """LiveKit will not answer what the caller just said (see ``reason``): no reply comes,
    the turn is not in the history."""

    name: ClassVar[str] = "user_turn_declined"
    reason: TurnDeclineReason = "rejected"
    item_id: Label = ""
    """The declined turn's chat item, when LiveKit made one."""
    prepared_speech_id: Label = ""
    """The reply LiveKit prepared before the turn ended (``preemptive_generation``) and
    leaves parked: created, never scheduled, so never played nor ended. Empty if none."""


@attrs.frozen
class AgentSpeechCreated(Event):
    """A speech of the agent was scheduled (LiveKit's ``speech_created``)."""

    name: ClassVar[str] = "agent_speech_created"
    speech_id: Label = ""
    source: SpeechSource = "reply"
    from_agent_code: bool = False
    """The agent's own code asked for it: in its ``on_enter``, or a filler said in its
    ``on_user_turn_completed`` (the LiveKit adapter marks a speech created while either
    runs, by none of turnfsm's levers). Never taken for a policy's greeting, which is
    turnfsm's own speech or LiveKit's reply to the callee's first words; when the agent
    greets in its own words, its first such speech is the greeting."""


@attrs.frozen
class AgentSpeechStarted(Event):
    """The first audio of a speech was played to the caller."""

    name: ClassVar[str] = "agent_speech_started"
    speech_id: Label = ""


@attrs.frozen
class AgentSpeechEnded(Event):
    """A speech is done: played out, or interrupted after ``played_seconds``."""

    name: ClassVar[str] = "agent_speech_ended"
    speech_id: Label = ""
    interrupted: bool = False
    played_seconds: float = attrs.field(default=0.0, converter=_seconds)


@attrs.frozen
class AssistantMessageCommitted(Event):
    """An assistant message of a speech was added to the chat context."""

    name: ClassVar[str] = "assistant_message_committed"
    item_id: Label = ""
    speech_id: Label = ""
    text: Text = ""
    interrupted: bool = False


@attrs.frozen
class ToolStepStarted(Event):
    """A speech's reply asked for tools: one step, however many parallel calls."""

    name: ClassVar[str] = "tool_step_started"
    speech_id: Label = ""
    calls: int = 1


@attrs.frozen
class ToolStepFinished(Event):
    """The tools of one step returned; the reply would now continue with their output."""

    name: ClassVar[str] = "tool_step_finished"
    speech_id: Label = ""
    calls: int = 1
    hands_over: bool = False
    """A tool of the step handed the call to another agent (LiveKit's
    ``has_agent_handoff``): the new agent speaks next, not a reply to the step."""


@attrs.frozen
class TimerExpired(Event):
    """A timer started by a :class:`~turnfsm.effects.StartTimer` effect expired: one
    event per timer (XState's ``after``), named ``<timer>_timer_expired``. A timer runs in
    the state that declares it (:func:`turnfsm.machine.after`); an expiry of a timer that
    no longer runs (cancelled, or already expired) is stale, and the controller ignores
    it."""

    timer: ClassVar[TimerName]


@attrs.frozen
class AwaitUserTimerExpired(TimerExpired):
    """Nobody spoke for ``await_user_timeout`` after the answer."""

    name: ClassVar[str] = "await_user_timer_expired"
    timer: ClassVar[TimerName] = "await_user"


@attrs.frozen
class IdleTimerExpired(TimerExpired):
    """The caller was silent for ``idle_timeout`` in their turn."""

    name: ClassVar[str] = "idle_timer_expired"
    timer: ClassVar[TimerName] = "idle"


@attrs.frozen
class MaxDurationTimerExpired(TimerExpired):
    """The call lasted ``max_call_duration``."""

    name: ClassVar[str] = "max_duration_timer_expired"
    timer: ClassVar[TimerName] = "max_duration"


@attrs.frozen
class ModelReplyTimerExpired(TimerExpired):
    """A realtime model's own answer to the capped tool step did not start within
    ``model_reply_wait``."""

    name: ClassVar[str] = "model_reply_timer_expired"
    timer: ClassVar[TimerName] = "model_reply"


@attrs.frozen
class ResponseDoneTimerExpired(TimerExpired):
    """A realtime model was not free within ``response_done_wait``."""

    name: ClassVar[str] = "response_done_timer_expired"
    timer: ClassVar[TimerName] = "response_done"


@attrs.frozen
class SpillOverTimerExpired(TimerExpired):
    """The ``spill_over_window`` after a greeting that muted the input is over: speech
    that starts now is new, not the tail of an overlap."""

    name: ClassVar[str] = "spill_over_timer_expired"
    timer: ClassVar[TimerName] = "spill_over"


@attrs.frozen
class ToolReplyHoldTimerExpired(TimerExpired):
    """LiveKit did not interrupt a held tool step's speech within ``tool_reply_hold``."""

    name: ClassVar[str] = "tool_reply_hold_timer_expired"
    timer: ClassVar[TimerName] = "tool_reply_hold"


TIMER_EVENTS: tuple[type[TimerExpired], ...] = (
    AwaitUserTimerExpired,
    IdleTimerExpired,
    MaxDurationTimerExpired,
    ModelReplyTimerExpired,
    ResponseDoneTimerExpired,
    SpillOverTimerExpired,
    ToolReplyHoldTimerExpired,
)
"""Each timer's expiry (a test checks there is one per :data:`~turnfsm.effects.TIMER_NAMES`)."""

EXPIRY_OF: dict[str, type[TimerExpired]] = {kind.timer: kind for kind in TIMER_EVENTS}
"""Each timer's expiry event class, by timer name."""


def timer_expired(timer: str, *, at: float) -> TimerExpired:
    """The expiry event of ``timer`` (what the adapter posts when a timer runs out).

    Raises:
        ValueError: no such timer.
    """
    kind = EXPIRY_OF.get(timer)
    if kind is None:
        raise ValueError(f"timer must be one of {sorted(EXPIRY_OF)}, got {show(timer)}")
    return kind(at=at)


@attrs.frozen
class AnsweringMachineDetected(Event):
    """The answering-machine detector's verdict on who picked up."""

    name: ClassVar[str] = "answering_machine_detected"
    result: AnsweringMachineResult = "human"


@attrs.frozen
class AgentSpeechInterrupted(Event):
    """LiveKit really interrupted a speech (after its own interruption rules:
    enabled, min_duration, min_words, false-interruption resume). Not raw VAD."""

    name: ClassVar[str] = "agent_speech_interrupted"
    speech_id: Label


def _effect_name(_instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or value not in EFFECTS_BY_NAME:
        raise ValueError(
            f"EffectOutcome.{attribute.name} must be one of {sorted(EFFECTS_BY_NAME)}, "
            f"got {show(value)}"
        )


@attrs.frozen
class EffectOutcome(Event):
    """What a lever did with an effect: done, refused by LiveKit, or failed (raised)."""

    name: ClassVar[str] = "effect_outcome"
    effect: Label = attrs.field(validator=_effect_name)
    """The effect's ``name``, e.g. ``"interrupt"``, ``"start_greeting"``."""
    outcome: EffectOutcomeKind
    speech_id: Label | None = None
    """The speech the effect was about, when there is one."""
    detail: Label = ""
    """A short reason, never transcript text."""
    text_chars: int | None = None
    """A ``drop_unspoken_text`` done: the length in characters of the speech's whole text
    the lever cut (all of it known: a realtime model's own transcript, of which LiveKit
    commits only a prefix behind a transcript synchronizer). Lengths only: the texts
    never leave the process."""
    heard_chars: int | None = None
    """A ``drop_unspoken_text`` done: the length of what the lever kept of that text, the
    words the caller heard to their end as it measured them (0: it removed the message).
    ``None`` for every other outcome."""


@attrs.frozen
class OutcomeBreached(Event):
    """What the session did broke a guarantee (the LiveKit adapter's outcome monitor: O1
    agent audio before the greeting ... O6 the input left muted). Traced only, so that a
    report names the calls that broke one; the machine's decisions do not change."""

    name: ClassVar[str] = "outcome_breached"
    check: OutcomeCheck


@attrs.frozen
class SessionError(Event):
    """The session reported an error; an unrecoverable one ends the call."""

    name: ClassVar[str] = "session_error"
    message: Label = ""
    recoverable: bool = True


@attrs.frozen
class InterruptionSettings(Event):
    """LiveKit's interruption settings for the session (told once, before the call
    starts): whether a turn is too short to interrupt the agent, judged as LiveKit judges
    one over a playing reply."""

    name: ClassVar[str] = "interruption_settings"
    min_words: int = 0
    """``interruption["min_words"]``: a turn of fewer words interrupts nothing."""
    stt: bool = True
    """The agent has an STT: LiveKit counts words only then."""
    manual_turns: bool = False
    """The session's turn detection is ``"manual"``: LiveKit counts no words then."""


@attrs.frozen
class RealtimeModelLinked(Event):
    """The session runs a realtime model (told once, before the call starts): what it
    does on its own decides which of the machine's realtime waits apply."""

    name: ClassVar[str] = "realtime_model_linked"
    replies_to_turns: bool = False
    """Server turn detection answers each committed user turn itself (``create_response``)."""
    replies_to_tool_output: bool = False
    """The model answers tool output itself (``auto_tool_reply_generation``)."""


@attrs.frozen
class ModelReplyStarted(Event):
    """A realtime model started a reply nobody asked for (server turn detection, or its own
    answer to tool output). Its speech waits: the machine lets it through (then it comes
    as ``AgentSpeechCreated``), adopts it as the final reply, or suppresses it."""

    name: ClassVar[str] = "model_reply_started"
    speech_id: Label = ""
    after_tool_output: bool = False
    """The model's last input was a tool output (else a user turn)."""
    duplicate: bool = False
    """LiveKit asks for this reply itself (the tool reply it requests): a second one."""


@attrs.frozen
class ModelResponseCreated(Event):
    """The realtime model's response is active (``response.created``): it rejects another
    ``response.create`` until that response is done."""

    name: ClassVar[str] = "model_response_created"
    response_id: Label = ""


@attrs.frozen
class ModelResponseDone(Event):
    """The realtime model's active response finished, whatever its status
    (``response.done``)."""

    name: ClassVar[str] = "model_response_done"
    response_id: Label = ""


@attrs.frozen
class ModelCancelSent(Event):
    """The client asked the realtime model to cancel a response (``response.cancel``):
    until the model answers it, a request may meet a cancel meant for another response,
    so none is sent (invariant I9)."""

    name: ClassVar[str] = "model_cancel_sent"
    cancel_id: Label = ""
    response_id: Label = ""
    """The response it names; empty: whatever response is active when it lands."""


@attrs.frozen
class ModelCancelAnswered(Event):
    """The realtime model answered a ``response.cancel``: the response it cancelled is
    done (``response.done``, cancelled), or it had none to cancel (an error), or the
    connection it was sent on is gone."""

    name: ClassVar[str] = "model_cancel_answered"
    cancel_id: Label = ""


REALTIME_EVENTS: tuple[type[Event], ...] = (
    RealtimeModelLinked,
    ModelReplyStarted,
    ModelResponseCreated,
    ModelResponseDone,
    ModelCancelSent,
    ModelCancelAnswered,
)
"""Events only a realtime model's link reports (a pipeline call never sees them)."""

EVENT_TYPES: tuple[type[Event], ...] = (
    SessionStarted,
    CallRinging,
    CallAnswered,
    CallEnded,
    UserSpeechStarted,
    UserSpeechEnded,
    UserTranscript,
    UserTurnCommitted,
    UserTurnEnded,
    UserTurnDeclined,
    AgentSpeechCreated,
    AgentSpeechStarted,
    AgentSpeechEnded,
    AssistantMessageCommitted,
    ToolStepStarted,
    ToolStepFinished,
    *TIMER_EVENTS,
    AnsweringMachineDetected,
    SessionError,
    AgentSpeechInterrupted,
    EffectOutcome,
    OutcomeBreached,
    InterruptionSettings,
    *REALTIME_EVENTS,
)
"""The whole input alphabet, in a stable order."""

EVENTS_BY_NAME: dict[str, type[Event]] = {cls.name: cls for cls in EVENT_TYPES}
