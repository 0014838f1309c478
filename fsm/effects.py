"""Outputs of the turn machine: what the adapter must do, as frozen data.

The controller returns these in order; the adapter executes each with exactly one
LiveKit lever. Nothing here does anything by itself, so the machine stays pure and
a trace of effects can be compared, replayed and drawn.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import attrs

from .fields import Label, Text

TimerName = Literal[
    "await_user",
    "idle",
    "max_duration",
    "model_reply",
    "response_done",
    "spill_over",
    "tool_reply_hold",
]
"""The timers the machine uses; each one's expiry comes back as its own event
(``idle_timer_expired``: :data:`turnfsm.events.TIMER_EVENTS`). With a realtime
model, ``model_reply`` bounds the wait for the model's own reply and ``response_done`` the
wait for its active response to finish (the greeting's ``greeting_awaiting_model`` and
``retry_awaiting_model``, the cap's ``final_awaits_model_reply`` and
``final_awaits_model_free``). ``tool_reply_hold`` bounds a
``HoldToolReply`` once the caller is silent (the hold's ``held_after_caller_stops``):
LiveKit has not interrupted by then, the reply to the tool output is sent.
``spill_over`` is the window after a greeting that muted the input
(``spill_over_window``) in which speech that starts is the tail of an overlap the muted
input missed."""

TIMER_NAMES: tuple[TimerName, ...] = get_args(TimerName)

REALTIME_TIMERS: tuple[TimerName, ...] = ("model_reply", "response_done")
"""The timers of the realtime waits, started only once a realtime model is linked."""


@attrs.frozen
class Effect:
    """Base of every effect."""

    name: ClassVar[str] = ""


@attrs.frozen
class MuteInput(Effect):
    """Stop the caller's audio from reaching VAD, STT and the model.

    With ``hold_audio`` the audio is kept aside instead of dropped, so that it can be
    heard whole once the input is unmuted (greeting overlap policy ``answer_whole``).
    """

    name: ClassVar[str] = "mute_input"
    hold_audio: bool = False


@attrs.frozen
class UnmuteInput(Effect):
    """Let the caller's audio through again; held audio is replayed or discarded."""

    name: ClassVar[str] = "unmute_input"
    replay_held_audio: bool = False


@attrs.frozen
class LockSpeech(Effect):
    """Make a speech uninterruptible (``speech_handle.allow_interruptions = False``)."""

    name: ClassVar[str] = "lock_speech"
    speech_id: Label


@attrs.frozen
class StartGreeting(Effect):
    """Say the greeting: a fixed ``text`` or a reply generated from ``instructions``.

    ``in_reply_to`` names the callee's committed turn when the greeting answers it, so
    the callee's first words stay in the history, before the greeting. ``first_words``
    are the callee's first words as their final transcript gave them, when the greeting
    answers them before LiveKit committed them (``greet_on="final_transcript"``): the
    greeting commits them, before it, and LiveKit's pending turn of them is dropped.
    """

    name: ClassVar[str] = "start_greeting"
    text: Text | None = None
    instructions: Text | None = None
    in_reply_to: Label | None = None
    first_words: Text | None = None


@attrs.frozen
class HoldUserTurns(Effect):
    """Keep listening but commit no user turn (speech overlapping a locked greeting).

    ``at_input_gate``: held by shutting the input gate instead, for a realtime model whose
    server detects turns (it commits, and answers, whatever it hears); ``hold_audio``
    keeps the caller's audio there for ``ResumeUserTurns`` to replay, as ``MuteInput``'s
    does (``answer_whole``), where without it the audio is dropped.
    """

    name: ClassVar[str] = "hold_user_turns"
    at_input_gate: bool = False
    hold_audio: bool = False


@attrs.frozen
class ResumeUserTurns(Effect):
    """Commit user turns again; with ``commit_pending`` the held speech becomes one turn.

    ``at_input_gate``: the gate a ``HoldUserTurns(at_input_gate=True)`` shut opens again;
    with ``replay_held_audio`` the audio it held is replayed (the model's server commits
    it), else dropped.
    """

    name: ClassVar[str] = "resume_user_turns"
    commit_pending: bool = False
    at_input_gate: bool = False
    replay_held_audio: bool = False


@attrs.frozen
class Interrupt(Effect):
    """Interrupt the agent's current speech; ``force`` also stops a locked one. With
    ``speech_id``, only that speech, wherever it is (before it plays: never heard)."""

    name: ClassVar[str] = "interrupt"
    force: bool = False
    speech_id: Label | None = None


@attrs.frozen
class DropUnspokenText(Effect):
    """Make the committed text of an interrupted speech match what was heard.

    ``keep="spoken"`` replaces it with the words the caller heard to their end, as the
    adapter measures them at the output; ``keep="nothing"`` removes the assistant item.
    The lever reports what it measured in its ``EffectOutcome`` (``text_chars``,
    ``heard_chars``): the call metrics read the cut there.
    """

    name: ClassVar[str] = "drop_unspoken_text"
    speech_id: Label
    keep: Literal["spoken", "nothing"] = "spoken"


@attrs.frozen
class ClearUserTurn(Effect):
    """Forget the user's pending, uncommitted speech (``session.clear_user_turn()``)."""

    name: ClassVar[str] = "clear_user_turn"


@attrs.frozen
class RejectUserTurn(Effect):
    """Answer nothing to a just-completed user turn and keep it out of the history."""

    name: ClassVar[str] = "reject_user_turn"
    item_id: Label = ""


@attrs.frozen
class CancelToolReply(Effect):
    """Do not let the model continue after the current tool step."""

    name: ClassVar[str] = "cancel_tool_reply"
    speech_id: Label = ""


@attrs.frozen
class HoldToolReply(Effect):
    """Keep the reply to the tool output of ``speech_id``'s tool step from reaching the
    model until ``ReleaseToolReply``: the caller barged into the step, and LiveKit has not
    decided yet whether it interrupts the speech (which would throw the reply away)."""

    name: ClassVar[str] = "hold_tool_reply"
    speech_id: Label


@attrs.frozen
class ReleaseToolReply(Effect):
    """LiveKit decided on the barge-in: the held reply to the tool output goes to the model
    (``send``: the speech was not interrupted), or never does."""

    name: ClassVar[str] = "release_tool_reply"
    speech_id: Label
    send: bool


@attrs.frozen
class FinalReplyWithoutTools(Effect):
    """Generate one spoken reply with ``tool_choice="none"``.

    If the model calls tools anyway, ``fallback_text`` is said instead of silence.
    """

    name: ClassVar[str] = "final_reply_without_tools"
    fallback_text: Text = ""


@attrs.frozen
class StartTimer(Effect):
    """Start a named timer; its expiry must come back as its own event
    (:func:`turnfsm.events.timer_expired`)."""

    name: ClassVar[str] = "start_timer"
    timer: TimerName
    seconds: float


@attrs.frozen
class CancelTimer(Effect):
    """Cancel a running named timer; it must not fire afterwards."""

    name: ClassVar[str] = "cancel_timer"
    timer: TimerName


SayReason = Literal["reprompt", "tool_fallback", "greeting"]
"""Why a fixed text is said: an idle re-prompt, the tool-cap fallback, or the greeting
retried after its start was refused or failed."""


@attrs.frozen
class Say(Effect):
    """Say a fixed text (``session.say``).

    ``allow_interruptions=False`` (the retried greeting) makes the speech locked from
    its creation, as ``StartGreeting`` does; its ``in_reply_to`` names the callee's turn
    it answers, and its ``first_words`` carries the words it answers, as
    ``StartGreeting``'s do.
    """

    name: ClassVar[str] = "say"
    text: Text
    reason: SayReason
    allow_interruptions: bool = True
    in_reply_to: Label | None = None
    first_words: Text | None = None


@attrs.frozen
class SuppressReply(Effect):
    """A realtime model's own reply (``ModelReplyStarted``) must not play: cancel it before
    it is authorized and delete what it added to the model's conversation."""

    name: ClassVar[str] = "suppress_reply"
    speech_id: Label


@attrs.frozen
class PauseModelReplies(Effect):
    """A realtime model with server turn detection must neither answer nor cancel on its
    own (``create_response`` and ``interrupt_response`` off) until ``ResumeModelReplies``:
    from the model's link, when the call has a greeting, until the greeting has played."""

    name: ClassVar[str] = "pause_model_replies"


@attrs.frozen
class ResumeModelReplies(Effect):
    """Server turn detection answers and interrupts on its own again."""

    name: ClassVar[str] = "resume_model_replies"


@attrs.frozen
class ForbidTools(Effect):
    """The model may call no tool (the session's ``tool_choice="none"``) until
    ``AllowTools``: set at the tool cap, before the step's output reaches a realtime model,
    so no reply it starts on its own can call one."""

    name: ClassVar[str] = "forbid_tools"


@attrs.frozen
class AllowTools(Effect):
    """The session's tool choice from before ``ForbidTools`` again."""

    name: ClassVar[str] = "allow_tools"


@attrs.frozen
class EndCall(Effect):
    """Hang up and close the session."""

    name: ClassVar[str] = "end_call"
    reason: Label


EFFECT_TYPES: tuple[type[Effect], ...] = (
    MuteInput,
    UnmuteInput,
    LockSpeech,
    StartGreeting,
    HoldUserTurns,
    ResumeUserTurns,
    Interrupt,
    DropUnspokenText,
    ClearUserTurn,
    RejectUserTurn,
    CancelToolReply,
    HoldToolReply,
    ReleaseToolReply,
    FinalReplyWithoutTools,
    StartTimer,
    CancelTimer,
    Say,
    SuppressReply,
    PauseModelReplies,
    ResumeModelReplies,
    ForbidTools,
    AllowTools,
    EndCall,
)

REALTIME_EFFECTS: tuple[type[Effect], ...] = (
    SuppressReply,
    PauseModelReplies,
    ResumeModelReplies,
    ForbidTools,
    AllowTools,
)
"""Effects emitted only for a realtime model (after ``RealtimeModelLinked``)."""

EFFECTS_BY_NAME: dict[str, type[Effect]] = {cls.name: cls for cls in EFFECT_TYPES}

CLEANUP_EFFECTS: tuple[type[Effect], ...] = (
    CancelTimer,
    UnmuteInput,
    ResumeUserTurns,
    ResumeModelReplies,
    AllowTools,
    EndCall,
)
"""The only effects allowed when the call ends (invariant I5)."""
