"""Inputs of the turn machine: what happened on the call, as frozen data.

Every event carries ``at``, the time in seconds on the caller's clock (the adapter
uses the event loop's clock, a simulation its own). The machine never reads a clock:
time enters only here, so a trace replays to the same effects.

Each class maps to one machine event, named by its ``name`` class attribute.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import attrs

from .effects import EFFECTS_BY_NAME

SpeechSource = Literal["say", "reply", "tool_reply"]
"""Where an agent speech came from: ``session.say``, a reply, or a reply after tools."""

AnsweringMachineResult = Literal["human", "machine"]

EffectOutcomeKind = Literal["done", "refused", "failed"]
"""What a lever did with an effect: ``done``, ``refused`` by LiveKit, or ``failed`` (raised)."""


def _non_negative(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


@attrs.frozen
class Event:
    """Base of every input; ``at`` is seconds on the caller's clock."""

    name: ClassVar[str] = ""
    at: float = attrs.field(converter=float, validator=_non_negative, kw_only=True)


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
    reason: str = "hangup"


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
    text: str = ""
    is_final: bool = False


@attrs.frozen
class UserTurnCommitted(Event):
    """The user's turn ended and was committed as a chat item."""

    name: ClassVar[str] = "user_turn_committed"
    text: str = ""
    item_id: str = ""


@attrs.frozen
class AgentSpeechCreated(Event):
    """A speech of the agent was scheduled (LiveKit's ``speech_created``)."""

    name: ClassVar[str] = "agent_speech_created"
    speech_id: str = ""
    source: SpeechSource = attrs.field(
        default="reply", validator=attrs.validators.in_(("say", "reply", "tool_reply"))
    )


@attrs.frozen
class AgentSpeechStarted(Event):
    """The first audio of a speech was played to the caller."""

    name: ClassVar[str] = "agent_speech_started"
    speech_id: str = ""


@attrs.frozen
class AgentSpeechEnded(Event):
    """A speech is done: played out, or interrupted after ``played_seconds``."""

    name: ClassVar[str] = "agent_speech_ended"
    speech_id: str = ""
    interrupted: bool = False
    played_seconds: float = attrs.field(default=0.0, converter=float, validator=_non_negative)
    played_text: str | None = None
    """What the caller heard, when the output chain knows it (a transcript synchronizer)."""


@attrs.frozen
class AssistantMessageCommitted(Event):
    """An assistant message of a speech was added to the chat context."""

    name: ClassVar[str] = "assistant_message_committed"
    item_id: str = ""
    speech_id: str = ""
    text: str = ""
    interrupted: bool = False


@attrs.frozen
class ToolStepStarted(Event):
    """A speech's reply asked for tools: one step, however many parallel calls."""

    name: ClassVar[str] = "tool_step_started"
    speech_id: str = ""
    calls: int = 1


@attrs.frozen
class ToolStepFinished(Event):
    """The tools of one step returned; the reply would now continue with their output."""

    name: ClassVar[str] = "tool_step_finished"
    speech_id: str = ""
    calls: int = 1


@attrs.frozen
class TimerFired(Event):
    """A timer started by a :class:`~turnfsm.effects.StartTimer` effect expired."""

    name: ClassVar[str] = "timer_fired"
    timer: str = ""


@attrs.frozen
class AnsweringMachineDetected(Event):
    """The answering-machine detector's verdict on who picked up."""

    name: ClassVar[str] = "answering_machine_detected"
    result: AnsweringMachineResult = attrs.field(
        default="human", validator=attrs.validators.in_(("human", "machine"))
    )


@attrs.frozen
class AgentSpeechInterrupted(Event):
    """LiveKit really interrupted a speech (after its own interruption rules:
    enabled, min_duration, min_words, false-interruption resume). Not raw VAD."""

    name: ClassVar[str] = "agent_speech_interrupted"
    speech_id: str


def _effect_name(_instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value not in EFFECTS_BY_NAME:
        raise ValueError(
            f"{attribute.name} must be one of {sorted(EFFECTS_BY_NAME)}, got {value!r}"
        )


@attrs.frozen
class EffectOutcome(Event):
    """What a lever did with an effect: done, refused by LiveKit, or failed (raised)."""

    name: ClassVar[str] = "effect_outcome"
    effect: str = attrs.field(validator=_effect_name)
    """The effect's ``name``, e.g. ``"interrupt"``, ``"start_greeting"``."""
    outcome: EffectOutcomeKind = attrs.field(
        validator=attrs.validators.in_(get_args(EffectOutcomeKind))
    )
    speech_id: str | None = None
    """The speech the effect was about, when there is one."""
    detail: str = ""
    """A short reason, never transcript text."""


@attrs.frozen
class SessionError(Event):
    """The session reported an error; an unrecoverable one ends the call."""

    name: ClassVar[str] = "session_error"
    message: str = ""
    recoverable: bool = True


EVENT_TYPES: tuple[type[Event], ...] = (
    SessionStarted,
    CallRinging,
    CallAnswered,
    CallEnded,
    UserSpeechStarted,
    UserSpeechEnded,
    UserTranscript,
    UserTurnCommitted,
    AgentSpeechCreated,
    AgentSpeechStarted,
    AgentSpeechEnded,
    AssistantMessageCommitted,
    ToolStepStarted,
    ToolStepFinished,
    TimerFired,
    AnsweringMachineDetected,
    SessionError,
    AgentSpeechInterrupted,
    EffectOutcome,
)
"""The whole input alphabet, in a stable order."""

EVENTS_BY_NAME: dict[str, type[Event]] = {cls.name: cls for cls in EVENT_TYPES}
