"""The guards and actions that :class:`turnfsm.machine.TurnMachine` names.

``TurnRules`` is attached to the machine as a listener. Guards read the policy, the
call context and the incoming event (``ev``); actions update the context and append
effects to the outbox, in the order the machine runs them (exit, on, enter). They
never perform I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Literal, TypeVar

import attrs
from statemachine import State, StateChart

from . import effects as fx
from .context import TurnContext
from .events import (
    AgentSpeechCreated,
    AgentSpeechEnded,
    AgentSpeechInterrupted,
    AgentSpeechStarted,
    AnsweringMachineDetected,
    AssistantMessageCommitted,
    CallEnded,
    EffectOutcome,
    Event,
    InterruptionSettings,
    ModelCancelAnswered,
    ModelCancelSent,
    ModelReplyStarted,
    RealtimeModelLinked,
    SessionError,
    TimerExpired,
    ToolStepFinished,
    ToolStepStarted,
    UserTranscript,
    UserTurnCommitted,
    UserTurnDeclined,
    UserTurnEnded,
)
from .machine import (
    PRE_GREETING_STATES,
    TIMERS,
    After,
    atomic_states,
    leaf_transitions,
    leaves_under,
    timers_declared,
)
from .policy import TurnPolicy

GuardKind = Literal["policy", "event", "context", "region", "state"]
"""What a guard reads: the policy only (decided once per call, so diagrams prune by it),
the event, the call's context, a region beside the turn (the caller's voice, the realtime
model's activity: their state), or the turn's state with the policy."""

_Guard = TypeVar("_Guard", bound=Callable[..., bool])


def guard(kind: GuardKind) -> Callable[[_Guard], _Guard]:
    """Declare a rule method as a guard of ``kind``."""

    def mark(method: _Guard) -> _Guard:
        method.guard_kind = kind  # type: ignore[attr-defined]
        return method

    return mark


@attrs.define
class TurnRules:
    """Guards and actions of the turn machine, over one call's policy and context."""

    policy: TurnPolicy
    context: TurnContext = attrs.field(factory=TurnContext)
    outbox: list[fx.Effect] = attrs.field(factory=list)

    def emit(self, effect: fx.Effect) -> None:
        self.outbox.append(effect)

    # -- guards -------------------------------------------------------------------------

    @guard("policy")
    def is_outbound(self) -> bool:
        return self.policy.direction == "outbound"

    @guard("policy")
    def has_greeting(self) -> bool:
        return self.policy.has_greeting

    @guard("policy")
    def mutes_greeting(self) -> bool:
        return self.policy.mutes_greeting

    @guard("policy")
    def answers_whole_overlap(self) -> bool:
        return self.policy.greeting_overlap == "answer_whole"

    @guard("region")
    def caller_is_speaking(self, machine: StateChart) -> bool:
        return _caller_speaks(machine)

    @guard("state")
    def input_is_muted(self, machine: StateChart) -> bool:
        return input_muted(self.policy, machine.configuration_values)

    @guard("state")
    def in_greeting(self, machine: StateChart) -> bool:
        return "greeting" in machine.configuration_values

    @guard("policy")
    def agent_speaks_first(self) -> bool:
        return self.policy.first_speaker == "agent"

    @guard("policy")
    def greets_in_own_words(self) -> bool:
        return self.policy.greets_in_own_words

    @guard("event")
    def is_first_words(self, ev: UserTurnCommitted) -> bool:
        return ev.item_id == self.context.first_words_item

    @guard("policy")
    def greets_on_final_transcript(self) -> bool:
        return self.policy.greet_on == "final_transcript"

    @guard("event")
    def has_final_words(self, ev: UserTranscript) -> bool:
        return ev.is_final and bool(ev.text.strip())

    @guard("region")
    def runs_realtime_model(self, machine: StateChart) -> bool:
        return _runs_realtime_model(machine)

    @guard("region")
    def model_detects_turns(self, machine: StateChart) -> bool:
        """The realtime model's server detects the caller's turns and commits them itself,
        as it hears them: only a shut input gate holds them."""
        return _model_answers_turns(machine)

    @guard("event")
    def link_answers_turns(self, ev: RealtimeModelLinked) -> bool:
        return ev.replies_to_turns

    @guard("event")
    def link_answers_tool_output(self, ev: RealtimeModelLinked) -> bool:
        return ev.replies_to_tool_output

    @guard("policy")
    def drops_overlap(self) -> bool:
        return self.policy.greeting_overlap == "drop"

    @guard("event")
    def from_agent_code(self, ev: AgentSpeechCreated) -> bool:
        return ev.from_agent_code

    @guard("event")
    def is_greeting_speech(self, ev: AgentSpeechEnded) -> bool:
        return ev.speech_id == self.context.greeting_speech_id

    @guard("event")
    def is_last_active_speech(self, ev: AgentSpeechEnded) -> bool:
        return self.context.active_speeches <= {ev.speech_id}

    @guard("event")
    def another_speech_in_flight(self, ev: AgentSpeechEnded) -> bool:
        return bool(self.context.active_speeches - {ev.speech_id})

    @guard("event")
    def prepared_reply_in_flight(self, ev: UserTurnDeclined) -> bool:
        """The reply is one the machine waits for and that never played: not a speech that
        runs a tool step, nor one whose message LiveKit committed (its unspoken text
        dropped): both were scheduled, never left prepared."""
        speech_id, ctx = ev.prepared_speech_id, self.context
        return (
            bool(speech_id)
            and speech_id in ctx.active_speeches
            and speech_id != ctx.tool_speech_id
            and speech_id not in ctx.dropped_speeches
        )

    @guard("event")
    def only_the_prepared_reply_in_flight(self, ev: UserTurnDeclined) -> bool:
        return self.context.active_speeches <= {ev.prepared_speech_id}

    @guard("event")
    def needs_drop(self, ev: AssistantMessageCommitted) -> bool:
        return (
            ev.interrupted
            and self.policy.interrupted_text != "keep"
            and ev.speech_id in self.context.active_speeches
            and ev.speech_id not in self.context.dropped_speeches
        )

    @guard("event")
    def is_tool_step_speech(self, ev: AgentSpeechInterrupted) -> bool:
        return ev.speech_id == self.context.tool_speech_id

    @guard("event")
    def is_held_tool_reply(self, ev: AgentSpeechInterrupted | AgentSpeechEnded) -> bool:
        return ev.speech_id == self.context.held_tool_reply

    @guard("event")
    def tool_reply_hold_not_done(self, ev: EffectOutcome) -> bool:
        return (
            ev.effect == "hold_tool_reply"
            and ev.outcome != "done"
            and ev.speech_id == self.context.held_tool_reply
        )

    @guard("policy")
    def holds_tool_replies(self) -> bool:
        """A barge-in into a tool step holds its reply: the hold is on, and the tools do
        not mute the caller (no barge-in then)."""
        return self.policy.tool_reply_hold is not None and not self.policy.mute_input_during_tools

    @guard("context")
    def has_tool_step_speech(self) -> bool:
        return self.context.tool_speech_id is not None

    @guard("event")
    def step_has_a_speech(self, ev: ToolStepStarted) -> bool:
        """The step's speech is known once the step is counted (``count_tool_round``):
        its own, or for a round past the cap (not counted) the last counted step's, if it
        still plays."""
        return self._counts_the_round() or self.context.tool_speech_id is not None

    @guard("region")
    def tool_reply_is_held(self, machine: StateChart) -> bool:
        return "reply_held" in machine.configuration_values

    @guard("event")
    def hands_over(self, ev: ToolStepFinished) -> bool:
        return ev.hands_over

    @guard("event")
    def is_backchannel(self, ev: UserTurnEnded, machine: StateChart) -> bool:
        """Too short to interrupt a playing reply, as LiveKit judges a turn at its end
        (``min_words``; not while the machine holds user turns: LiveKit's turn detection
        is manual then, and it counts no words)."""
        held = turns_held(self.policy, machine.configuration_values)
        return not held and ev.words < self.context.min_words

    @guard("event")
    def interrupt_not_done(self, ev: EffectOutcome) -> bool:
        return ev.effect == "interrupt" and ev.outcome != "done"

    @guard("event")
    def is_unmute_outcome(self, ev: EffectOutcome) -> bool:
        """In the replay of the greeting's held audio: it is over (or its unmute failed),
        as the outcome of its ``UnmuteInput`` comes when the replay is over."""
        return ev.effect == "unmute_input"

    @guard("event")
    def greeting_start_not_done(self, ev: EffectOutcome) -> bool:
        """The greeting did not start: before its speech exists (or, once it exists, when
        the outcome names it: it played something else), the call would be deaf."""
        return ev.effect == "start_greeting" and ev.outcome != "done"

    @guard("event")
    def names_the_greeting_speech(self, ev: EffectOutcome) -> bool:
        return ev.speech_id == self.context.greeting_speech_id

    @guard("event")
    def greeting_retry_not_done(self, ev: EffectOutcome) -> bool:
        """The greeting's locked retry did not start either. Its speech may exist already:
        a realtime model's refusal of the retry's ``response.create`` comes after LiveKit
        made the speech (and the machine locked it)."""
        return ev.effect == "say" and ev.outcome != "done"

    @guard("policy")
    def has_greeting_text(self) -> bool:
        return self.policy.greeting is not None

    @guard("region")
    def step_speech_interrupted(self, ev: ToolStepFinished, machine: StateChart) -> bool:
        """LiveKit interrupted the step's speech, whose reply is never played. On a
        realtime model LiveKit would still ask for it, after a cancel of whatever response
        is active (its interrupt before a tool reply): the answer to the caller who spoke
        meanwhile, when another reply's step had taken the machine out of ``tool_loop``
        (fuzz realtime seed 1998)."""
        ctx = self.context
        return _runs_realtime_model(machine) and ev.speech_id in ctx.interrupted_speeches

    @guard("region")
    def tool_loop_must_stop(self, machine: StateChart) -> bool:
        """The step's output is not answered: the user turn's rounds reached the cap (its
        final reply answers instead), or LiveKit interrupted the loop's speech."""
        interrupted = "tool_loop_interrupted" in machine.configuration_values
        return interrupted or self.context.tool_rounds >= self.policy.max_tool_steps

    @guard("region")
    def caps_the_tool_loop(self, ev: ToolStepFinished, machine: StateChart) -> bool:
        """The step ends the user turn's last round: one final reply without tools follows.
        Not once a step handed the call over (this one, or an earlier one of the turn: the
        handoff's region, as the step began): the old agent, draining, says nothing more,
        and the new agent speaks next."""
        last_round = self.context.tool_rounds >= self.policy.max_tool_steps
        handed_over = ev.hands_over or "handing_off" in machine.configuration_values
        return last_round and not handed_over

    @guard("state")
    def runs_a_tool_step(self, machine: StateChart) -> bool:
        return "tool_loop" in machine.configuration_values

    @guard("state")
    def in_conversation(self, machine: StateChart) -> bool:
        return "conversation" in machine.configuration_values

    @guard("event")
    def is_active_speech(self, ev: ToolStepFinished) -> bool:
        return ev.speech_id in self.context.active_speeches

    @guard("event")
    def is_capped_step_speech(self, ev: AgentSpeechEnded) -> bool:
        return ev.speech_id == self.context.final_after_speech

    @guard("event")
    def is_final_reply_speech(self, ev: AgentSpeechEnded) -> bool:
        return ev.speech_id == self.context.final_speech_id

    @guard("event")
    def prepares_the_final_reply(self, ev: UserTurnDeclined) -> bool:
        return ev.prepared_speech_id == self.context.final_speech_id

    @guard("policy")
    def greets_silent_callee(self) -> bool:
        return self.policy.on_await_user_timeout == "greet"

    @guard("context")
    def can_reprompt(self) -> bool:
        return self.context.reprompts < self.policy.idle_max_reprompts

    @guard("region")
    def model_is_free(self, machine: StateChart) -> bool:
        """No response of the realtime model is active and no cancel of it is on its way
        (always, on a pipeline): a request now is neither refused nor cut."""
        return not _model_busy(machine)

    @guard("event")
    def last_cancel_answered(self, ev: ModelCancelAnswered) -> bool:
        """This answer is to the last cancel on its way (an answer to one the machine
        never took, sent before the model's link, frees nothing)."""
        return self.context.pending_cancels <= {ev.cancel_id}

    @guard("region")
    def model_answers_tool_output(self, machine: StateChart) -> bool:
        """The realtime model answers tool output on its own (told, or seen once)."""
        return AUTO_TOOL_REPLIES in machine.configuration_values

    @guard("region")
    def is_unwanted_tool_reply(self, ev: ModelReplyStarted, machine: StateChart) -> bool:
        """A second answer to tool output: LiveKit asks for this one itself, or the final
        reply is already asked for or adopted. Not while the cap awaits the model's own
        answer: that one is the final reply (it runs under ``tool_choice="none"``:
        ``ForbidTools`` reached the model first), the cap adopts it."""
        active = machine.configuration_values
        if not ev.after_tool_output or not ADOPTING_PHASES.isdisjoint(active):
            return False
        return ev.duplicate or "capped" in active

    @guard("event")
    def is_tool_reply(self, ev: ModelReplyStarted) -> bool:
        return ev.after_tool_output

    @guard("event")
    def machine_answered(self, ev: AnsweringMachineDetected) -> bool:
        return ev.result == "machine"

    @guard("policy")
    def hangs_up_on_machine(self) -> bool:
        return self.policy.on_answering_machine == "hang_up"

    @guard("event")
    def error_is_recoverable(self, ev: SessionError) -> bool:
        return ev.recoverable

    # -- timers -------------------------------------------------------------------------

    def _start_timer(self, timer: fx.TimerName) -> None:
        """Start ``timer`` (one that does not run: see :func:`running_timers`), if the
        policy gives it seconds."""
        seconds = getattr(self.policy, TIMERS[timer].seconds)
        if seconds is not None:
            self.emit(fx.StartTimer(timer=timer, seconds=seconds))

    def _cancel_timer(self, timer: After, machine: StateChart, ev: Event | None = None) -> None:
        """Cancel ``timer``, declared by a state of the configuration being left (in an exit
        or a transition's action), if it runs there (as :func:`running_timers` says of
        that configuration: the policy sets it, and the caller's voice lets it run) and
        the event ``ev`` is not its expiry (it fired); one started in this very step (a
        state entered and left in one step, e.g. a wait that ends at once) is taken back
        instead, so the adapter never starts it."""
        started = [
            i
            for i, effect in enumerate(self.outbox)
            if isinstance(effect, fx.StartTimer) and effect.timer == timer.timer
        ]
        if started:
            del self.outbox[started[-1]]
            return
        # (the voice region is read only for a timer of the caller's silence)
        speaking = timer.while_silent and _caller_speaks(machine)
        fired = isinstance(ev, TimerExpired) and ev.timer == timer.timer
        if _timer_runs(self.policy, timer, speaking) and not fired:
            self.emit(fx.CancelTimer(timer=timer.timer))

    def start_timers(self, state: State, machine: StateChart) -> None:
        """Entering ``state``: start the timers it declares (:func:`~turnfsm.machine.after`)
        to run from its entry (one that runs while the caller is silent, if they are)."""
        speaking = _caller_speaks(machine)
        for timer in timers_declared(state):
            if not (timer.while_silent and speaking):
                self._start_timer(timer.timer)

    def cancel_timers(self, state: State, machine: StateChart, ev: Event | None = None) -> None:
        """Leaving ``state``: its timers stop (but the one whose expiry leaves it)."""
        for timer in timers_declared(state):
            self._cancel_timer(timer, machine, ev)

    def stop_silence_timers(self, state: State, machine: StateChart) -> None:
        """The caller speaks: the timers running in ``state`` (declared by it or a state
        around it) that time their silence stop."""
        for timer in _timers_around(state):
            if timer.while_silent:
                self._cancel_timer(timer, machine)

    def start_silence_timers(self, state: State, machine: StateChart) -> None:
        """The caller stopped: the timers running in ``state`` that time their silence
        start (again, if they ran: an end of speech the caller's voice did not wait for)."""
        for timer in _timers_around(state):
            if timer.while_silent:
                self._cancel_timer(timer, machine)
                self._start_timer(timer.timer)

    def take_expiry(self, ev: TimerExpired, active: Iterable[State]) -> bool:
        """Whether ``ev`` expires a timer running with these states active
        (:func:`running_timers`); else it is stale (cancelled, its expiry already on its
        way), and the controller ignores it."""
        return ev.timer in running_timers(self.policy, active)

    # -- call lifecycle -----------------------------------------------------------------

    # Why the call ends is said once, by the transition into ``ended`` (its EndCall): the
    # machine decides nothing on it afterwards, so it is not kept. The trace, the metrics
    # (``CallMetrics.end_reason``) and the telemetry read it from that effect.

    def end_call(self, ev: CallEnded) -> None:
        self._end_call(ev.reason)

    def end_call_max_duration(self) -> None:
        self._end_call("max_duration")

    def end_call_no_answer(self) -> None:
        self._end_call("no_answer")

    def end_call_idle(self) -> None:
        self._end_call("idle")

    def end_call_answering_machine(self) -> None:
        self._end_call("answering_machine")

    def end_call_session_error(self) -> None:
        self._end_call("error")

    def end_call_greeting_failed(self) -> None:
        self._end_call("greeting_failed")

    def _end_call(self, reason: str) -> None:
        self.emit(fx.EndCall(reason=reason))

    # -- the greeting -------------------------------------------------------------------

    def note_first_words(self, ev: UserTurnCommitted) -> None:
        self.context.first_words_item = ev.item_id

    def note_first_words_heard(self, ev: UserTranscript) -> None:
        self.context.first_words_heard = ev.text

    def begin_greeting(self, machine: StateChart) -> None:
        """Lock the caller out of the greeting (muted, or turns held)."""
        policy = self.policy
        if policy.mutes_greeting:
            self._mute(hold_audio=policy.greeting_overlap == "answer_whole")
        else:
            self._hold_user_turns(machine)

    def stop_agent_speech_before_greeting(self, ev: AgentSpeechCreated) -> None:
        """Only that speech: the greeting, created after it, must not be cut."""
        self.emit(fx.Interrupt(force=True, speech_id=ev.speech_id))

    def lock_greeting(self, ev: AgentSpeechCreated) -> None:
        """This speech is the greeting: LiveKit's reply carrying it, turnfsm's own, or the
        agent's first speech when it greets in its own words."""
        self.context.greeting_speech_id = ev.speech_id
        self._add_active_speech(ev.speech_id)
        self.emit(fx.LockSpeech(speech_id=ev.speech_id))

    def forget_greeting_speech(self) -> None:
        """The greeting's start was refused or failed: the retry's speech is the greeting's."""
        self.context.greeting_speech_id = None

    # With a realtime model the greeting (and its retry) is asked for only when the model
    # can take it: no response of it active. The wait is bounded by the ``response_done``
    # timer; on expiry the greeting is asked for anyway (a refusal is retried once, as any
    # failed start).

    def request_greeting(self) -> None:
        ctx, policy = self.context, self.policy
        self.emit(
            fx.StartGreeting(
                text=policy.greeting,
                instructions=policy.greeting_instructions,
                in_reply_to=ctx.first_words_item,
                first_words=ctx.first_words_heard,
            )
        )

    def say_greeting_locked(self) -> None:
        """The greeting's retry: its text said once more, locked, answering the first words
        (only a fixed greeting is retried)."""
        ctx, policy = self.context, self.policy
        assert policy.greeting is not None
        self.emit(
            fx.Say(
                text=policy.greeting,
                reason="greeting",
                allow_interruptions=False,
                in_reply_to=ctx.first_words_item,
                first_words=ctx.first_words_heard,
            )
        )

    def forget_greeting(self) -> None:
        """Leaving the greeting, whatever the way: its speech and first words."""
        ctx = self.context
        ctx.greeting_speech_id = None
        ctx.first_words_item = None
        ctx.first_words_heard = None

    # Leaving the greeting for the conversation: one action per lock and overlap policy
    # (on a hang-up, it releases everything without replaying or committing).

    def resume_user_turns_on_hang_up(self, target: object, machine: StateChart) -> None:
        """The greeting that keeps listening hangs up: its held turns are released (each
        other way out of it resumes or discards them in its own way)."""
        if not self.policy.mutes_greeting and _is_end(target):
            self._resume_user_turns(machine, commit_pending=False)

    def unmute_after_greeting(self, target: object) -> None:
        """Leaving the greeting that muted the input (its entry did): ``answer_whole``
        replays the caller's held speech, heard whole; ``drop`` (or a hang-up) drops it."""
        policy = self.policy
        if policy.mutes_greeting:
            replay = policy.greeting_overlap == "answer_whole" and not _is_end(target)
            self._unmute(replay_held_audio=replay)

    def hold_user_turns_through_the_replay(self, machine: StateChart) -> None:
        """The greeting's held audio is replayed: user turns are held until its end (the
        unmute's outcome comes then), so that it becomes one turn: LiveKit would commit
        each utterance of the replay on its own, and the reply to the first (its tool steps
        mute the input) would cut the next ones apart. Not with a realtime model (the chart
        enters no replay then): its hold shuts the input gate, which would stop the
        replay, and the server commits the replayed audio itself."""
        self._hold_user_turns(machine)

    def resume_user_turns_after_the_replay(self, target: object, machine: StateChart) -> None:
        """Leaving the replay. At its end (back to ``listening_open``: its only way there)
        what the caller said in it is one turn now; if they still speak, it becomes one
        when they stop. Left otherwise (the agent speaks first, or the call ends), the
        rest of it comes as turns of their own."""
        over = getattr(target, "id", None) == "listening_open"
        heard = "replay_heard_caller" in machine.configuration_values
        self._resume_user_turns(
            machine, commit_pending=over and heard and not _caller_speaks(machine)
        )

    def resume_user_turns_committing_a_finished_overlap(self, machine: StateChart) -> None:
        """``keep_listening`` + ``answer_whole``: an overlap already over (the caller's
        voice ended in the greeting) is one turn now; one still going on becomes a turn
        when the caller stops. (Held at the input gate, its audio is replayed: the model's
        server commits it.)"""
        finished = "caller_spoke_over_greeting" in machine.configuration_values
        self._resume_user_turns(machine, commit_pending=finished, replay_held_audio=True)

    def clear_and_resume_user_turns(self, machine: StateChart) -> None:
        """``keep_listening`` + ``drop``, the caller silent or the agent's turn next: forget
        what was held."""
        self.emit(fx.ClearUserTurn())
        self._resume_user_turns(machine, commit_pending=False)

    def hold_spill_over(self, machine: StateChart) -> None:
        """Speech started in the spill-over window: the tail of a missed overlap, held
        while it goes on (and discarded as its phase is left)."""
        self._hold_user_turns(machine)

    def stop_discarding_overlap(self, target: object, machine: StateChart) -> None:
        """The overlap is over (the caller stopped, or the agent speaks): what it said is
        forgotten and user turns are resumed; on a hang-up, only resumed."""
        if not _is_end(target):
            self.emit(fx.ClearUserTurn())
        self._resume_user_turns(machine, commit_pending=False)

    # -- input --------------------------------------------------------------------------

    # The input is muted exactly in the states that mute it (:func:`input_muted`): by
    # their enter actions, unmuted by their exit actions, whatever the way out.

    def _mute(self, *, hold_audio: bool) -> None:
        self.emit(fx.MuteInput(hold_audio=hold_audio))

    def _unmute(self, *, replay_held_audio: bool) -> None:
        self.emit(fx.UnmuteInput(replay_held_audio=replay_held_audio))

    # User turns are held exactly where :func:`turns_held` says: by the greeting that
    # keeps listening (its entry holds them, each way out resumes them, the hang-up too)
    # and in ``listening`` while an overlap is discarded or the held audio replays (their
    # phases' exits resume them). A realtime model's server detects turns itself, as it
    # hears them: there the hold shuts the input gate, holding the audio under
    # ``answer_whole`` for the resume to replay.

    def _hold_user_turns(self, machine: StateChart) -> None:
        at_gate = _model_answers_turns(machine)
        hold_audio = at_gate and self.policy.greeting_overlap == "answer_whole"
        self.emit(fx.HoldUserTurns(at_input_gate=at_gate, hold_audio=hold_audio))

    def _resume_user_turns(
        self, machine: StateChart, *, commit_pending: bool, replay_held_audio: bool = False
    ) -> None:
        at_gate = _model_answers_turns(machine)
        self.emit(
            fx.ResumeUserTurns(
                commit_pending=commit_pending,
                at_input_gate=at_gate,
                replay_held_audio=at_gate and replay_held_audio,
            )
        )

    def note_user_turn(self) -> None:
        """A fresh count of tool rounds (the cap's region opens them again, and the
        handoff's region leaves ``handing_off``, on the same event)."""
        ctx = self.context
        ctx.tool_rounds = 0
        ctx.reprompts = 0

    def reject_user_turn(self, ev: UserTurnCommitted) -> None:
        self.emit(fx.RejectUserTurn(item_id=ev.item_id))

    # -- agent speech -------------------------------------------------------------------

    def _add_active_speech(self, speech_id: str) -> None:
        if speech_id not in self.context.active_speeches:
            self.context.active_speeches = self.context.active_speeches | {speech_id}

    def stop_early_speech(self, ev: AgentSpeechCreated) -> None:
        """Nobody is listening yet: the agent must not talk before the callee."""
        self._add_active_speech(ev.speech_id)
        self.emit(fx.Interrupt(force=True))

    def note_speech(self, ev: AgentSpeechCreated) -> None:
        self._add_active_speech(ev.speech_id)

    def note_speech_end(self, ev: AgentSpeechEnded) -> None:
        ctx = self.context
        if ev.interrupted and self.policy.interrupted_text != "keep":
            self._drop_unspoken(ev.speech_id)
        ctx.active_speeches = ctx.active_speeches - {ev.speech_id}
        ctx.tool_replies_due = ctx.tool_replies_due - {ev.speech_id}
        ctx.interrupted_speeches = ctx.interrupted_speeches - {ev.speech_id}
        if ev.speech_id == ctx.tool_speech_id:
            ctx.tool_speech_id = None
        if ev.speech_id == ctx.final_after_speech:
            ctx.final_after_speech = None
        ctx.dropped_speeches = ctx.dropped_speeches - {ev.speech_id}

    def forget_prepared_reply(self, ev: UserTurnDeclined) -> None:
        """The reply LiveKit prepared for a turn it declined: stopped (forced: it never
        played, and LiveKit gives it its session's ``allow_interruptions``), and no longer
        waited for, as LiveKit never ends it on its own."""
        ctx, speech_id = self.context, ev.prepared_speech_id
        ctx.active_speeches = ctx.active_speeches - {speech_id}
        if ctx.final_speech_id == speech_id:
            # the final reply's speech: still to come while capped (the cap's region
            # awaits the next speech), forgotten after a later user turn
            ctx.final_speech_id = None
        self.emit(fx.Interrupt(force=True, speech_id=speech_id))

    def say_tool_fallback_if_final_reply_silent(self, ev: AgentSpeechEnded) -> None:
        """The final reply without tools played nothing (the model called tools again);
        also when it ends after the next user turn, which left the cap."""
        ctx = self.context
        if ev.speech_id == ctx.final_speech_id:
            ctx.final_speech_id = None
            if not ev.interrupted and ev.played_seconds == 0:
                self.emit(fx.Say(text=self.policy.tool_cap_fallback, reason="tool_fallback"))

    def drop_unspoken_text(self, ev: AssistantMessageCommitted) -> None:
        self._drop_unspoken(ev.speech_id)

    def _drop_unspoken(self, speech_id: str) -> None:
        ctx = self.context
        if speech_id in ctx.dropped_speeches:
            return
        ctx.dropped_speeches = ctx.dropped_speeches | {speech_id}
        self.emit(
            fx.DropUnspokenText(
                speech_id=speech_id,
                keep="nothing" if self.policy.interrupted_text == "drop" else "spoken",
            )
        )

    def reprompt(self) -> None:
        """Say the re-prompt, and time the silence again: the speech it creates moves the
        machine on (cancelling the timer); if none comes (the say refused or failed) the
        timer still re-prompts or hangs up."""
        self.context.reprompts += 1
        self.emit(fx.Say(text=self.policy.idle_message, reason="reprompt"))
        self._start_timer("idle")

    # -- tools --------------------------------------------------------------------------

    def count_tool_round(self, ev: ToolStepStarted) -> None:
        """Count one round, however many parallel calls. A round past the cap is not
        counted, and nothing is emitted yet: LiveKit reports a step once its tools run,
        and can cancel its reply only when they have (``tool_step_finished``, where
        ``tool_loop_must_stop`` cancels it)."""
        ctx = self.context
        self._add_active_speech(ev.speech_id)
        ctx.tool_replies_due = ctx.tool_replies_due - {ev.speech_id}
        if self._counts_the_round():  # (never so once capped)
            ctx.tool_rounds += 1
            ctx.tool_speech_id = ev.speech_id

    def _counts_the_round(self) -> bool:
        """A step starting now is a round of the user turn's, under the cap."""
        return self.context.tool_rounds < self.policy.max_tool_steps

    def note_speech_interrupted(self, ev: AgentSpeechInterrupted, machine: StateChart) -> None:
        ctx = self.context
        # only a realtime model asks for a tool reply of an interrupted speech
        # (step_speech_interrupted): kept elsewhere, the fact would only multiply the
        # configurations the explorer walks (a subset of the active speeches each)
        if _runs_realtime_model(machine) and ev.speech_id in ctx.active_speeches:
            ctx.interrupted_speeches = ctx.interrupted_speeches | {ev.speech_id}

    def cancel_tool_reply(self, ev: ToolStepFinished) -> None:
        """The step's output is not answered: past the cap (the cap's region asks for the
        final reply), or its speech was interrupted."""
        self.emit(fx.CancelToolReply(speech_id=ev.speech_id))

    # The hold of a tool step's reply (its region, ``tool_reply``): entered on a barge-in
    # into the step; the way out decides whether the reply goes to the model.

    def hold_tool_reply(self) -> None:
        """Entering the hold: the reply to the step's output waits for LiveKit's decision."""
        ctx = self.context
        assert ctx.tool_speech_id is not None  # (has_tool_step_speech, step_has_a_speech)
        ctx.held_tool_reply = ctx.tool_speech_id
        self.emit(fx.HoldToolReply(speech_id=ctx.tool_speech_id))

    def release_tool_reply(self, ev: Event | None, target: State) -> None:
        """Leaving the hold: the reply goes to the model (LiveKit did not interrupt the
        speech: it declined the turn, committed one without interrupting it, a turn too
        short to interrupt ended, the step hands the call over, or the hold ran out),
        unless the held speech was interrupted or is over (its reply is never asked
        for), the adapter did not hold it (nothing waits), or the call ends (the adapter
        drops every gate as it detaches)."""
        ctx = self.context
        speech_id, ctx.held_tool_reply = ctx.held_tool_reply, None
        assert speech_id is not None  # (hold_tool_reply)
        if _is_end(target) or isinstance(ev, EffectOutcome):
            return
        over = isinstance(ev, AgentSpeechInterrupted | AgentSpeechEnded)
        self.emit(fx.ReleaseToolReply(speech_id=speech_id, send=not over))

    def decline_backchannel(self) -> None:
        """A turn too short to interrupt, over the held reply's speech: no turn, as
        LiveKit's ``min_words`` makes one over a playing reply (LiveKit applies it only
        to its current speech; the step's speech is a background one while its tools
        run, which any committed turn would interrupt). It interrupts nothing, so the
        reply goes to the model now (the hold is left on the same event)."""
        self.emit(fx.RejectUserTurn())

    def note_interruption_settings(self, ev: InterruptionSettings) -> None:
        """LiveKit counts a turn's words for ``min_words`` only with an STT and outside
        manual turn detection."""
        self.context.min_words = ev.min_words if ev.stt and not ev.manual_turns else 0

    def note_tool_reply_due(self, ev: ToolStepFinished, machine: StateChart) -> None:
        """LiveKit asks the model for the reply to the step's output (under the agent's
        tool choice: a handover's old agent, draining, asks without tools). Noted on a
        realtime model, where a reply's tool loop goes on beside the next turn's."""
        if _runs_realtime_model(machine) and not ev.hands_over:
            self.context.tool_replies_due = self.context.tool_replies_due | {ev.speech_id}

    def note_tool_reply_plays(self, ev: AgentSpeechStarted) -> None:
        """The speech plays: the reply to its tool output is under way, not stopped."""
        self.context.tool_replies_due = self.context.tool_replies_due - {ev.speech_id}

    # The cap's region (``tool_cap``): entered when a step ends the user turn's last
    # round; its phases wait, on a realtime model, for the capped step's speech to end,
    # for the model's own answer to the step's output (adopted) and for the model to be
    # free, before the final reply is asked for.

    def forget_earlier_final_reply(self) -> None:
        """An earlier turn's final reply may still play: it is not this turn's, so its end
        neither allows tools again before this one is said nor says the fallback."""
        self.context.final_speech_id = None

    def forbid_tools_for_the_final_reply(self, machine: StateChart) -> None:
        """A realtime model: before the step's output reaches the model, no reply to it
        may call a tool (a pipeline's final reply carries its own tool choice)."""
        if _runs_realtime_model(machine):
            self.emit(fx.ForbidTools())
            self._stop_tool_replies_due()

    def allow_tools_after_the_final_reply(self, machine: StateChart) -> None:
        """The final reply is over (or the next user turn, or the call's end, came first):
        a realtime model has its tools again."""
        if _runs_realtime_model(machine):
            self.emit(fx.AllowTools())

    def _stop_tool_replies_due(self) -> None:
        """Another reply's tool loop runs beside the capped one (a realtime model goes on
        with a reply's tool rounds after the caller's next turn, beside its answer to that
        turn). LiveKit asks for the reply to that loop's finished step with a tool choice
        of its own, which outweighs the forbidden tools, and its reply can be cancelled
        only as the step finishes: a model that calls a tool then runs a round past the
        cap (fuzz realtime seed 1283). That reply is stopped before it is asked for (its
        speech interrupted, forced: it plays nothing yet); the final reply answers the
        turn, every step's output before it."""
        ctx = self.context
        for speech_id in sorted(ctx.tool_replies_due):
            self.emit(fx.Interrupt(force=True, speech_id=speech_id))
        ctx.tool_replies_due = frozenset()

    def note_capped_step_speech(self, ev: ToolStepFinished) -> None:
        self.context.final_after_speech = ev.speech_id

    def forget_capped_step_speech(self) -> None:
        """The wait for the capped step's speech is over before its end (the model's own
        answer adopted, or the next user turn): its end no longer matters. (Its end, in
        the wait, forgets it too, as it does ``tool_speech_id``.)"""
        self.context.final_after_speech = None

    def ask_final_reply(self) -> None:
        self.emit(fx.FinalReplyWithoutTools(fallback_text=self.policy.tool_cap_fallback))

    def note_final_speech(self, ev: AgentSpeechCreated) -> None:
        self.context.final_speech_id = ev.speech_id

    # -- realtime models ----------------------------------------------------------------

    def note_cancel_sent(self, ev: ModelCancelSent) -> None:
        self.context.pending_cancels = self.context.pending_cancels | {ev.cancel_id}

    def note_cancel_answered(self, ev: ModelCancelAnswered) -> None:
        self.context.pending_cancels = self.context.pending_cancels - {ev.cancel_id}

    def forget_cancels(self) -> None:
        """Leaving ``model_cancelling``: the last cancel on its way is answered."""
        self.context.pending_cancels = frozenset()

    def suppress_model_reply(self, ev: ModelReplyStarted) -> None:
        self.emit(fx.SuppressReply(speech_id=ev.speech_id))

    # A realtime model's own replies are paused in the states that hold the pause
    # (model_replies_paused): the greeting's enter action pauses them unless the state
    # before it held the pause already, the exit actions of the states that hold it
    # resume them unless the state after it holds it too, and entering
    # ``auto_turn_replies`` (the model's link) pauses them where the states then active
    # hold the pause. A model linked before the greeting that answers turns itself is so
    # paused at once: prevented rather than cancelled, its answer to the first words
    # would make the greeting wait out that reply's cancel round trip (issue 19).

    def pause_model_replies(self, source: State, machine: StateChart) -> None:
        self._replies_follow(
            self._replies_paused(_around(source), machine),
            self._replies_paused(machine.configuration_values, machine),
        )

    def resume_model_replies(self, target: State, machine: StateChart) -> None:
        self._replies_follow(
            self._replies_paused(machine.configuration_values, machine),
            self._replies_paused(_around(target), machine),
        )

    def _replies_paused(self, active: Collection[object], machine: StateChart) -> bool:
        """Whether the states ``active`` (a transition's source or target and the states
        around it, or the configuration) hold the pause of the replies of the model
        ``machine`` runs, as it answers turns now. (The turn's transitions never move that
        region: its state now is its state before them too. Entering
        ``auto_turn_replies``, the source's states hold no pause: a model was never paused
        before it answered turns itself.)"""
        return model_replies_paused(self.policy, _model_answers_turns(machine), active)

    def _replies_follow(self, paused: bool, now: bool) -> None:
        if now and not paused:
            self.emit(fx.PauseModelReplies())
        elif paused and not now:
            self.emit(fx.ResumeModelReplies())

    def mute_for_tools(self) -> None:
        if self.policy.mute_input_during_tools:
            self._mute(hold_audio=False)

    def unmute_after_tools(self) -> None:
        if self.policy.mute_input_during_tools:
            self._unmute(replay_held_audio=False)


def running_timers(policy: TurnPolicy, active: Iterable[State]) -> frozenset[fx.TimerName]:
    """The timers running with these states active (a configuration's states, compound
    ones included, as the chart's ``State`` objects): those they declare
    (:func:`~turnfsm.machine.after`) whose seconds the policy sets, but the ones that
    time the caller's silence while the caller speaks. Each starts as its state is
    entered (or the caller falls silent), stops as it is left (or the caller speaks), and
    its expiry leaves the state or starts it again (``reprompt``): where the call is says
    which run."""
    states = tuple(active)
    speaking = _speaks({state.id for state in states})
    return frozenset(
        timer.timer
        for state in states
        for timer in timers_declared(state)
        if _timer_runs(policy, timer, speaking)
    )


def _timer_runs(policy: TurnPolicy, timer: After, speaking: bool) -> bool:
    """Whether ``timer``, declared by an active state, runs: the policy sets its seconds,
    and it does not time a silence the caller breaks."""
    return getattr(policy, timer.seconds) is not None and not (speaking and timer.while_silent)


def input_muted(policy: TurnPolicy, active: Collection[object]) -> bool:
    """Whether the input is muted with these states active (a configuration's states,
    compound ones included): in the greeting that mutes it, in the tool loop that does."""
    return ("greeting" in active and policy.mutes_greeting) or (
        "tool_loop" in active and policy.mute_input_during_tools
    )


HOLDING_PHASES: frozenset[str] = frozenset(
    {"discarding_overlap", "replaying_held_audio", *leaves_under("replaying_held_audio")}
)
"""The phases of ``listening`` that hold user turns (the replay's own phases too)."""


def turns_held(policy: TurnPolicy, active: Collection[object]) -> bool:
    """Whether user turns are held with these states active (a configuration's states,
    compound ones included): in the greeting that keeps listening, and in ``listening``
    while an overlap is discarded or the greeting's held audio replays."""
    greeting_holds = "greeting" in active and not policy.mutes_greeting
    return greeting_holds or not HOLDING_PHASES.isdisjoint(active)


ADOPTING_PHASES: frozenset[str] = frozenset(
    state.id
    for state in atomic_states()
    for transition in leaf_transitions(state)
    if "model_reply_started" in (str(event) for event in transition.events)
    and getattr(transition.target, "id", None) == "final_reply_awaited"
)
"""The cap's phases that adopt the model's own answer to tool output as the final reply
(read from the chart: those its ``model_reply_started`` leaves for ``final_reply_awaited``)."""


def _timers_around(state: State) -> Iterator[After]:
    """The timers ``state`` and the states around it declare: those running in it."""
    node: State | None = state
    while node is not None:
        yield from timers_declared(node)
        node = node.parent


def model_replies_paused(
    policy: TurnPolicy, replies_to_turns: bool, active: Collection[object]
) -> bool:
    """Whether a realtime model's own replies are paused with these states active (a
    configuration's states, compound ones included): a model that answers turns itself,
    through the greeting, and on a call with a greeting, before it too (the greeting
    replaces its answer to the first words)."""
    return replies_to_turns and (
        "greeting" in active
        or (policy.has_greeting and not PRE_GREETING_STATES.isdisjoint(active))
    )


def _around(state: State) -> set[str]:
    """``state`` and the states around it: what is active in it."""
    return {state.id, *(parent.id for parent in state.ancestors())}


UNLINKED = "model_unlinked"
"""The realtime model's state on a pipeline, and before a realtime model's link."""

MODEL_IDLE: frozenset[str] = frozenset({UNLINKED, "model_free"})
"""The realtime model's states in which a request to it is neither refused nor cut."""

RESPONDING: frozenset[str] = frozenset({"model_responding", "cancelling_active"})
"""The realtime model's states while a response of it is active."""


def _model_busy(machine: StateChart) -> bool:
    """The realtime model would refuse a request (a response of it is active), or a
    cancel still on its way could cut the response it starts: its region is neither free
    nor unlinked (a pipeline's model is never busy in that sense)."""
    return MODEL_IDLE.isdisjoint(machine.configuration_values)


AUTO_TURN_REPLIES = "auto_turn_replies"
"""The turn replies' state while the realtime model answers the caller's turns itself."""

AUTO_TOOL_REPLIES = "auto_tool_replies"
"""The tool output replies' state while the realtime model answers tool output itself."""


def _model_answers_turns(machine: StateChart) -> bool:
    """The realtime model's server answers the caller's turns itself. (Only the link moves
    its region, so this is its state both before and after any other step.)"""
    return AUTO_TURN_REPLIES in machine.configuration_values


def _runs_realtime_model(machine: StateChart) -> bool:
    """A realtime model is linked: its region has left ``model_unlinked``. (Only the link
    moves it there, so this is its state both before and after any other step.)"""
    return UNLINKED not in machine.configuration_values


def _caller_speaks(machine: StateChart) -> bool:
    """The caller's voice region is in ``caller_speaking``. (No event that reads it moves
    that region, so this is its state both before and after the step.)"""
    return _speaks(machine.configuration_values)


def _speaks(active: Collection[object]) -> bool:
    """The caller speaks with these states active (their speech over a greeting that
    answers it whole, ``caller_spoke_over_greeting``, is over)."""
    return "caller_speaking" in active


def _is_end(target: object) -> bool:
    return getattr(target, "id", None) == "ended"


def guards_of(rules_class: type[TurnRules] = TurnRules) -> dict[str, GuardKind]:
    """Every guard a rules class declares (with :func:`guard`), by name, and its kind."""
    members = {name: getattr(rules_class, name) for name in dir(rules_class)}
    kinds = {name: getattr(member, "guard_kind", None) for name, member in members.items()}
    return {name: kind for name, kind in kinds.items() if kind is not None}


POLICY_GUARDS: tuple[str, ...] = tuple(
    name for name, kind in guards_of().items() if kind == "policy"
)
"""Guards that read the policy only: a policy decides them once for the whole call."""
