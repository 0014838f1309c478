"""The named safety invariants, checked step by step from the outside.

:class:`SafetyMonitor` watches (state before, event, state after, effects) and keeps
its own shadow of what the effects did (muted, held, timers, tool rounds). It never
reads the machine's context, so a bug in the rules cannot hide itself from it.

======  ======================  ========================================================
name    short name              what must hold
======  ======================  ========================================================
I1      greeting_locked         in ``greeting`` no ``Interrupt`` is emitted but one of a
                                single speech that is not the greeting's; once the
                                greeting started the input is muted (``mute_input``) or
                                user turns are held (``keep_listening``), and the
                                greeting's speech (the first created in it that the
                                agent's own code did not ask for; when the agent greets
                                in its own words, its first speech) is locked in the
                                step that creates it; a retried greeting is said locked,
                                in the greeting
I2      no_leaked_mute          input is muted only in a muting state, user turns are
                                held only around the greeting and a realtime model's own
                                replies are paused only until the greeting has played;
                                all are released when the call ends, whatever the path
I3      tool_cap                per user turn at most ``max_tool_steps`` tool rounds are
                                answered: a step that ends at or past the cap has its
                                tool reply cancelled, and reaching the cap asks for
                                exactly one final reply without tools (with a
                                realtime model: forbids tools at once, and asks for the
                                final reply at most once; none when the step, or an
                                earlier one since the user turn, hands the call to
                                another agent, which speaks next)
I4      drop_unspoken           an interrupted speech yields ``DropUnspokenText`` (unless
                                the policy keeps interrupted text) no later than the
                                step that reports its end
I5      quiet_after_end         entering ``ended`` emits clean-up only, with one
                                ``EndCall``; after that, nothing
I6      timers_balanced         a timer is started only when not running, cancelled only
                                when running, and none runs after the end
I7      first_words_kept        the callee's first committed words are never rejected
                                nor cleared (the greeting answers them); a greeting
                                started on their final transcript carries them
I8      silent_until_callee     an agent speech created before the greeting is stopped
                                (in ``greeting``: one the agent's own code asked for
                                while the greeting's speech is still to come)
I9      model_free_when_asked   a realtime model is asked for the greeting or the final
                                reply only when none of its responses is active (it
                                refuses a second) and every ``response.cancel`` sent to
                                it was answered (one still on its way cancels whatever
                                is active when it lands), or when the wait for the model
                                to be free (``response_done``) expired
I10     model_reply_held        a realtime model's own reply before or during the
                                greeting is suppressed in the step that reports it
======  ======================  ========================================================
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

import attrs

from . import effects as fx
from . import events as ev
from .machine import FIRST_WORDS_STATES, PRE_GREETING_STATES
from .policy import TurnPolicy

INVARIANTS: dict[str, str] = {
    "I1": "greeting_locked",
    "I2": "no_leaked_mute",
    "I3": "tool_cap",
    "I4": "drop_unspoken",
    "I5": "quiet_after_end",
    "I6": "timers_balanced",
    "I7": "first_words_kept",
    "I8": "silent_until_callee",
    "I9": "model_free_when_asked",
    "I10": "model_reply_held",
}

TOOL_STATES = frozenset({"listening", "speaking", "tool_loop"})
UNTIL_THE_GREETING = PRE_GREETING_STATES | {"greeting"}
"""Before the greeting and while it plays: no reply of the model's own (I10)."""


class InvariantViolation(AssertionError):
    """A step broke a named safety invariant."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant} {INVARIANTS[invariant]}: {message}")
        self.invariant = invariant


@attrs.define
class SafetyMonitor:
    """Checks every step of one call against the invariants; raises on the first breach."""

    policy: TurnPolicy
    muted: bool = False
    turns_held: bool = False
    greeting_started: bool = False
    greeting_speech: str | None = None
    timers: set[str] = attrs.field(factory=set)
    tool_rounds: int = 0
    final_replies: int = 0
    barge_in_stopped_tools: bool = False
    handing_over: bool = False
    """A tool step handed the call over since the last user turn."""
    dropped: set[str] = attrs.field(factory=set)
    first_words: str | None = None
    realtime: bool = False
    model_responding: bool = False
    cancels_pending: set[str] = attrs.field(factory=set)
    model_replies_paused: bool = False
    tools_forbidden_at_cap: bool = False
    steps: int = 0

    def copy(self) -> SafetyMonitor:
        """An independent copy (its sets copied): a step's checkpoint, an explorer branch."""
        values: list[Any] = [
            value.copy() if type(value) is set else value for value in _monitor_values(self)
        ]
        return SafetyMonitor(*values)

    def shadow(self) -> Hashable:
        """What the monitor knows of the call's effects, hashable: every field but the
        policy (fixed per call) and the step count."""
        return tuple(
            frozenset(value) if type(value) is set else value for value in _shadow_values(self)
        )

    def check(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        """Check one step and update the shadow state.

        Raises:
            InvariantViolation: naming the first invariant the step breaks.
        """
        self.steps += 1
        if before == "ended":
            _require(not effects, "I5", f"{event.name} after the end emitted {effects}")
            return
        self._check_timers(event, effects)
        self._check_first_words(before, event, after, effects)
        self._check_greeting(before, event, after, effects)
        self._check_tools(before, event, effects)
        self._check_interrupted_text(event, effects)
        self._check_early_speech(before, event, effects)
        self._check_realtime(before, event, effects)
        self._apply_input_effects(effects)
        self._check_input_released(after)
        if after == "ended":
            self._check_clean_end(effects)

    def _check_timers(self, event: ev.Event, effects: tuple[fx.Effect, ...]) -> None:
        if isinstance(event, ev.TimerExpired):
            if event.timer in self.timers:
                self.timers.discard(event.timer)
            else:
                _require(not effects, "I6", f"stale {event.timer} timer acted on: {effects}")
        for effect in effects:
            if isinstance(effect, fx.StartTimer):
                _require(effect.timer not in self.timers, "I6", f"{effect.timer} started twice")
                self.timers.add(effect.timer)
            elif isinstance(effect, fx.CancelTimer):
                _require(effect.timer in self.timers, "I6", f"{effect.timer} cancelled idle")
                self.timers.discard(effect.timer)

    def _check_first_words(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        if (
            isinstance(event, ev.UserTurnCommitted)
            and before in FIRST_WORDS_STATES
            and self.first_words is None
        ):
            self.first_words = event.item_id
            _require(
                not _has(effects, fx.RejectUserTurn, fx.ClearUserTurn),
                "I7",
                f"first words {event.item_id!r} cleared: {effects}",
            )
        if (
            isinstance(event, ev.UserTranscript)
            and before in FIRST_WORDS_STATES
            and after == "greeting"
        ):
            # the greeting starts on the words' final transcript: it carries them
            starts = [effect for effect in effects if isinstance(effect, fx.StartGreeting)]
            _require(
                [effect.first_words for effect in starts] == [event.text],
                "I7",
                f"greeting started on first words it does not carry: {effects}",
            )
        for effect in effects:
            if isinstance(effect, fx.RejectUserTurn) and self.first_words is not None:
                _require(effect.item_id != self.first_words, "I7", "first words rejected")

    def _check_greeting(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        if "greeting" in (before, after):
            cuts = [
                effect
                for effect in effects
                if isinstance(effect, fx.Interrupt)
                and effect.speech_id in (None, self.greeting_speech)
            ]
            _require(not cuts, "I1", f"interrupt in greeting: {effects}")
        if _has(effects, fx.StartGreeting):
            self.greeting_started = True
            locked = _has(
                effects, fx.MuteInput if self.policy.mutes_greeting else fx.HoldUserTurns
            )
            _require(locked or self.muted or self.turns_held, "I1", "greeting starts unlocked")
        for effect in effects:
            if isinstance(effect, fx.Say) and effect.reason == "greeting":
                _require(
                    not effect.allow_interruptions and before == after == "greeting",
                    "I1",
                    f"greeting said unlocked or outside the greeting: {effect}",
                )
        own_words = before == "awaiting_agent" and after == "greeting"
        if own_words:  # the agent's own first speech is the greeting: locked as it starts
            self.greeting_started = True
        if isinstance(event, ev.AgentSpeechCreated) and (
            own_words
            or (
                before == "greeting" and self.greeting_speech is None and not event.from_agent_code
            )
        ):
            self.greeting_speech = event.speech_id
            _require(
                fx.LockSpeech(speech_id=event.speech_id) in effects,
                "I1",
                f"greeting speech {event.speech_id!r} not locked",
            )
        refused = (
            isinstance(event, ev.EffectOutcome)
            and event.effect == fx.StartGreeting.name
            and event.outcome != "done"
            and event.speech_id == self.greeting_speech
        )
        if refused or (after != "greeting" and before == "greeting"):
            # (a refused start's speech is not the greeting: the retry's is)
            self.greeting_speech = None
        if after != "greeting" and before == "greeting":
            self.greeting_started = False
            self.first_words = None
        if after == "greeting" and self.greeting_started:
            still_locked = self.muted or _has(effects, fx.MuteInput)
            if not self.policy.mutes_greeting:
                still_locked = self.turns_held or _has(effects, fx.HoldUserTurns)
            _require(still_locked, "I1", f"greeting unlocked after {event.name}")

    def _check_tools(self, before: str, event: ev.Event, effects: tuple[fx.Effect, ...]) -> None:
        if isinstance(event, ev.UserTurnCommitted):
            self.tool_rounds = 0
            self.final_replies = 0
            self.tools_forbidden_at_cap = False
            self.barge_in_stopped_tools = False
            self.handing_over = False
        if before == "tool_loop" and isinstance(event, ev.AgentSpeechInterrupted):
            self.barge_in_stopped_tools = True
        if (
            before == "tool_loop"
            and isinstance(event, ev.EffectOutcome)
            and event.effect == "interrupt"
            and event.outcome != "done"
        ):
            self.barge_in_stopped_tools = False  # the loop goes on: the cap applies again
        if isinstance(event, ev.ToolStepStarted) and before in TOOL_STATES:
            # a round past the cap is none of the turn's (held at the cap): LiveKit has
            # started its tools already; its reply must be cancelled as it finishes
            self.tool_rounds = min(self.tool_rounds + 1, self.policy.max_tool_steps)
        refused = _has(effects, fx.CancelToolReply)
        if _has(effects, fx.ForbidTools):  # realtime: the final reply is asked for later
            self.tools_forbidden_at_cap = True
        finals = sum(isinstance(e, fx.FinalReplyWithoutTools) for e in effects)
        self.final_replies += finals
        _require(self.final_replies <= 1, "I3", "more than one final reply in a user turn")
        reached_cap = self.tool_rounds >= self.policy.max_tool_steps
        if (
            isinstance(event, ev.ToolStepFinished)
            and before == "tool_loop"
            and reached_cap
            and not self.barge_in_stopped_tools
        ):
            _require(refused, "I3", "tool reply not cancelled at the cap")
            _require(
                self.final_replies == 1
                or (self.realtime and self.tools_forbidden_at_cap)
                or event.hands_over  # the new agent speaks next, not the old one
                or self.handing_over,  # ...also after an earlier step handed over
                "I3",
                "no final reply without tools at the cap",
            )
        if isinstance(event, ev.ToolStepFinished) and event.hands_over:
            self.handing_over = True

    def _check_interrupted_text(self, event: ev.Event, effects: tuple[fx.Effect, ...]) -> None:
        for effect in effects:
            if isinstance(effect, fx.DropUnspokenText):
                self.dropped.add(effect.speech_id)
        if (
            isinstance(event, ev.AgentSpeechEnded)
            and event.interrupted
            and self.policy.interrupted_text != "keep"
        ):
            _require(
                event.speech_id in self.dropped,
                "I4",
                f"interrupted speech {event.speech_id!r} kept its unspoken text",
            )
        if isinstance(event, ev.AgentSpeechEnded):
            self.dropped.discard(event.speech_id)

    def _check_early_speech(
        self, before: str, event: ev.Event, effects: tuple[fx.Effect, ...]
    ) -> None:
        if isinstance(event, ev.AgentSpeechCreated) and before in PRE_GREETING_STATES:
            _require(fx.Interrupt(force=True) in effects, "I8", "agent spoke before the callee")
        if (
            isinstance(event, ev.AgentSpeechCreated)
            and before == "greeting"
            and event.from_agent_code
            and self.greeting_speech is None
        ):
            stop = fx.Interrupt(force=True, speech_id=event.speech_id)
            _require(stop in effects, "I8", "the agent spoke before the greeting")

    def _note_model(self, event: ev.Event) -> None:
        if isinstance(event, ev.ModelResponseCreated):
            self.model_responding = True
        elif isinstance(event, ev.ModelResponseDone):
            self.model_responding = False
        elif isinstance(event, ev.ModelCancelSent):
            self.cancels_pending.add(event.cancel_id)
        elif isinstance(event, ev.ModelCancelAnswered):
            self.cancels_pending.discard(event.cancel_id)

    def _check_realtime(
        self, before: str, event: ev.Event, effects: tuple[fx.Effect, ...]
    ) -> None:
        if isinstance(event, ev.RealtimeModelLinked):
            self.realtime = True
        if self.realtime:  # (the machine takes a model's events only once it is linked)
            self._note_model(event)
        asks = [
            effect
            for effect in effects
            if isinstance(effect, fx.StartGreeting | fx.FinalReplyWithoutTools)
            or (isinstance(effect, fx.Say) and effect.reason == "greeting")
        ]
        waited_out = isinstance(event, ev.ResponseDoneTimerExpired)
        busy = self.model_responding or self.cancels_pending
        _require(
            not (asks and self.realtime and busy) or waited_out,
            "I9",
            f"asked {asks} of a model with an active response or an unanswered cancel"
            f" ({sorted(self.cancels_pending)}), on {event.name}",
        )
        if (
            isinstance(event, ev.ModelReplyStarted)
            and self.realtime
            and before in UNTIL_THE_GREETING
        ):
            _require(
                fx.SuppressReply(speech_id=event.speech_id) in effects,
                "I10",
                f"the model's own reply {event.speech_id!r} let through in {before}",
            )

    def _apply_input_effects(self, effects: tuple[fx.Effect, ...]) -> None:
        for effect in effects:
            if isinstance(effect, fx.MuteInput):
                self.muted = True
            elif isinstance(effect, fx.UnmuteInput):
                self.muted = False
            elif isinstance(effect, fx.HoldUserTurns):
                self.turns_held = True
            elif isinstance(effect, fx.ResumeUserTurns):
                self.turns_held = False
            elif isinstance(effect, fx.PauseModelReplies):
                self.model_replies_paused = True
            elif isinstance(effect, fx.ResumeModelReplies):
                self.model_replies_paused = False

    def _check_input_released(self, after: str) -> None:
        muting_states = set()
        if self.policy.mutes_greeting:
            muting_states.add("greeting")
        if self.policy.mute_input_during_tools:
            muting_states.add("tool_loop")
        _require(not self.muted or after in muting_states, "I2", f"input left muted in {after}")
        _require(
            not self.turns_held or after in ("greeting", "listening"),
            "I2",
            f"user turns left held in {after}",
        )
        _require(
            not self.model_replies_paused or after in UNTIL_THE_GREETING,
            "I2",
            f"the model's own replies left paused in {after}",
        )

    def _check_clean_end(self, effects: tuple[fx.Effect, ...]) -> None:
        extra = [e for e in effects if not isinstance(e, fx.CLEANUP_EFFECTS)]
        _require(not extra, "I5", f"non-cleanup effects on the way to ended: {extra}")
        ends = sum(isinstance(e, fx.EndCall) for e in effects)
        _require(ends == 1, "I5", f"{ends} EndCall effects on the way to ended")
        _require(not self.timers, "I6", f"timers left running at the end: {sorted(self.timers)}")


def _has(effects: tuple[fx.Effect, ...], *kinds: type[fx.Effect]) -> bool:
    return any(isinstance(e, kinds) for e in effects)


def _require(condition: bool, invariant: str, message: str) -> None:
    if not condition:
        raise InvariantViolation(invariant, message)


_MONITOR_FIELDS = tuple(field.name for field in attrs.fields(SafetyMonitor))
_monitor_values = operator.attrgetter(*_MONITOR_FIELDS)
"""Every field's value, in declaration order (the order ``__init__`` takes them)."""
_shadow_values = operator.attrgetter(
    *(name for name in _MONITOR_FIELDS if name not in ("policy", "steps"))
)
