"""The LiveKit adapter: session events in, turn-machine effects out.

Embedding: before ``session.start(...)`` (every step of a real call, in order, is in the
README's "Embedding"; a missing piece is refused: :mod:`.embedding`)::

    controller = TurnController(policy)
    attach(session, controller, end_call=hang_up_room(ctx))

The adapter subscribes to the session's events, translates each into a
:mod:`turnfsm.events` event (table below), hands it to the controller, and executes the
returned effects in order with :data:`~turnfsm.adapters.livekit.levers.LEVERS`. Events
raised while effects run (LiveKit emits ``speech_created`` inside ``session.say``) are
queued and handled right after, in the same callback: the machine runs to completion
one event at a time.

Every effect's outcome comes back to the machine as ``EffectOutcome`` (done, refused by
LiveKit, or failed: :mod:`.effect_outcomes`), queued like any event. Barge-in is
LiveKit's decision: a speech handle that LiveKit (or a lever) really interrupted is
reported as ``AgentSpeechInterrupted`` (:mod:`.interruption`), never the raw VAD start.
Beside the machine's effect invariants, :class:`~.outcomes.OutcomeMonitor` checks what
the session did (audio before and of the greeting, replies to an overlap, committed text
against played audio, tool rounds, the input, and that the machine's state agrees with
the session's: O7); ``attach(..., strict=True)`` raises a breach, otherwise it is one
warning per check and call, counted in ``adapter.outcomes.counts`` (and listed in
``adapter.outcomes.breaches``).

Nothing escapes into LiveKit's emitter: a translation or lever that raises (or the
future a lever awaits) is logged once per lever and error type, as a warning naming the
effect and the state, and the call goes on; a controller that raises releases the input
(gate open, user turns resumed) so a bug never leaves the caller muted. Transcript text
reaches the logs only when the controller keeps it (``keep_text``): otherwise a failed
lever's effect is shown redacted, and every error (a lever's, a plugin's it awaited, a
failed controller step's, also with its traceback) by its type, without its message, which
may quote the call (:func:`turnfsm.trace.redact`).

Events duplicated, out of order or late are no error:

* the machine ignores what does not apply where it arrives (:data:`turnfsm.machine.IGNORED`):
  the end of a speech it never saw (unknown speech ids), a second ``speech_created`` of
  the same handle (the handle's end is reported once), a duplicated assistant message
  (unspoken text is dropped once), a second session start (no second input gate);
* a speech handle already done when its ``speech_created`` arrives ends right after it;
* events after the call ended (a tool step finishing after the hang-up) are traced in
  ``ended`` with no effect;
* after ``close`` the adapter is detached: session events no longer reach it, and its
  own late callbacks (a speech handle done, a timer due) are ignored with a debug log.

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
                                                 session's, from the text sent)
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

import asyncio
import collections
import inspect
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from livekit.agents import Agent, AgentSession, StopResponse, llm, utils
from livekit.agents.voice import SpeechHandle, agent_activity
from livekit.agents.voice.events import (
    AgentFalseInterruptionEvent,
    AgentStateChangedEvent,
    CloseEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    ToolCallStarted,
    ToolExecutionUpdatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
)

from turnfsm import TurnController
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.controller import ConcurrentUseError
from turnfsm.tools.metrics import CallMeter, CallMetrics
from turnfsm.trace import TraceStep, redact

from .audio import InputGate, PlayedSegment, PlayoutMeter, measure_playout
from .effect_outcomes import EffectRefused, PendingOutcome
from .embedding import (
    EmbeddingError,
    check_attach,
    claim,
    early_speech_refusal,
    guard_start,
    session_started,
    unguard_start,
)
from .heard import SpeakingRates
from .interruption import InterruptionWatch, ToolReplyHolds, TurnEnd, TurnEndWatch
from .levers import LEVERS, Lever, commit_held_turn
from .log import logger
from .outcomes import OutcomeMonitor
from .prerender import PrerenderedTexts
from .realtime import RealtimeLink
from .telemetry import report_call
from .text import estimated_seconds
from .text_turns import report_text_turns, stop_reporting_text_turns
from .turn_hook import UserTurnHook, reply_model
from .warmup import EchoWarmUpHold

_R = TypeVar("_R")

EndCall = Callable[[str], object]
"""Hangs up the call, given the hang-up reason; an awaitable it returns is awaited."""

BEFORE_FIRST_WORDS = frozenset({"start", "ringing", "awaiting_user"})
"""States where the machine stops every agent speech: the caller's first words, which the
policy's greeting answers, are still to come."""

_ADAPTER_ATTRIBUTE = "_turnfsm_adapter"
"""Where the attached adapter is kept, on the session itself: a registry beside it would
keep a session that is never closed (and its LiveKit tasks) alive through its adapter."""


def attach(
    session: AgentSession,
    controller: TurnController,
    *,
    end_call: EndCall | None = None,
    strict: bool | None = None,
) -> TurnAdapter:
    """Drive ``session``'s turn-taking with ``controller``. Call before ``session.start``.

    Args:
        session: the session, not started yet.
        controller: the call's controller, new: a controller serves one call.
        end_call: how to hang up (e.g. delete the room of a SIP call:
            :func:`.job.hang_up_room`), called with the hang-up reason; an awaitable it
            returns is awaited, and its failure reported as the ``end_call`` effect's
            outcome. By default the session is shut down, which leaves a caller in the
            room: ``session.start(room=...)`` refuses that under a policy that hangs up on
            its own (:mod:`.embedding`).
        strict: how the outcome monitor (:mod:`.outcomes`) treats a breach: ``True``
            raises :class:`~.outcomes.OutcomeBreach` (tests), ``False`` logs one warning
            per check and call; by default as strict as the controller.

    Raises:
        EmbeddingError: the session is started already, has a controller already, the
            controller served or serves another call, or ``end_call`` is no function
            (:func:`.embedding.check_attach`).

    ``session.start`` then raises :class:`~.embedding.EmbeddingError`, before starting
    anything, when the agent's hooks or the hang-up are missing
    (:func:`.embedding.check_start`).

    The session's ``max_tool_steps`` is raised to the policy's if it is lower: LiveKit's
    own cap (``max_tool_steps=N`` lets N+1 tool rounds through, then forces a reply with
    ``tool_choice="none"`` on the same speech) would otherwise end the loop before the
    policy's cap is reached. At the policy's value it stays one round behind the
    machine's cap, as a safety net.
    """
    check_attach(session, controller, end_call)
    adapter = TurnAdapter(session, controller, end_call=end_call, strict=strict)
    adapter.subscribe()
    claim(controller)
    guard_start(adapter)  # the agent and room are checked when the session starts
    report_text_turns(adapter)  # session.run(user_input=...): typed turns are turns too
    options = session.options
    options.max_tool_steps = max(options.max_tool_steps, controller.policy.max_tool_steps)
    return adapter


def entering_agent() -> Agent | None:
    """The agent whose ``on_enter`` is running here (in its task, or one it started), as
    LiveKit 1.8.9 marks it for itself; ``None`` elsewhere."""
    mark = getattr(agent_activity, "_OnEnterContextVar", None)
    data = mark.get(None) if mark is not None else None
    agent: Agent | None = getattr(data, "agent", None)
    return agent


def adapter_for(session: AgentSession) -> TurnAdapter | None:
    """The adapter attached to ``session``, if any."""
    adapter: TurnAdapter | None = getattr(session, _ADAPTER_ATTRIBUTE, None)
    return adapter


_ONE_EVENT = inspect.Signature(
    [inspect.Parameter("event", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
)
"""The signature of a guarded handler, ready-made: LiveKit's event emitter reads each
callback's signature on every emit (to pass it as many arguments as it takes), and the
realtime link's handlers see every protocol event, tens a second."""


class TurnAdapter:
    """Connects one ``AgentSession`` to one :class:`~turnfsm.TurnController`."""

    def __init__(
        self,
        session: AgentSession,
        controller: TurnController,
        *,
        end_call: EndCall | None = None,
        strict: bool | None = None,
    ) -> None:
        self.session = session
        self.controller = controller
        self.end_call = end_call
        self.gate: InputGate | None = None
        """In front of ``session.input.audio`` only under a policy that can mute or hold
        the caller's audio (otherwise the session's input is left as it is)."""
        self.meter: PlayoutMeter | None = None
        """Right behind ``session.output.audio`` (which stays the session's object), or
        in front of it when it is a bare sink (:func:`~.audio.measure_playout`)."""
        self.transcript_final = False
        """A final transcript arrived since the caller last started speaking: the STT is
        done with what was said (``commit_user_turn`` need not wait for another)."""
        self._reported_turn: str | None = None
        """The last user message reported by the agent hook (reported once)."""
        self.warned_realtime_typed_turn = False
        """A typed turn reached a realtime model before the greeting (warned once)."""
        self._typed_turns: set[str] = set()
        """Typed turns reported before LiveKit commits them (:mod:`.text_turns`): their
        ``conversation_item_added`` is not a second turn."""
        self.agent_hook: UserTurnHook | None = None
        """The agent's own ``on_user_turn_completed`` while it runs (after turnfsm's
        report): a speech created meanwhile is the agent's, not LiveKit's reply."""
        self.speeches: dict[str, SpeechHandle] = {}
        self.assistant_messages: dict[str, llm.ChatMessage] = {}
        self.forwarded_texts: dict[str, str] = {}
        """Each speech's text as forwarded to the transcript (reported by
        :class:`~.agent.TurnAgent`): what LiveKit commits without a synchronizer."""
        self.last_segment: dict[str, PlayedSegment] = {}
        self.played_seconds: dict[str, float] = {}
        self.speaking_rates = SpeakingRates()
        """The voice's slowest rate so far, for cutting a reply whose audio never all came."""
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.site: object | None = None
        """The LiveKit event whose handler is running, or the agent hook being run (a
        :class:`~.turn_hook.UserTurnHook`), if any: the call site the steps it dispatches
        answer (a lever that must act on it, e.g. ``cancel_tool_reply()`` on a
        ``FunctionToolsExecutedEvent``, or the greeting written into the hook's
        ``turn_ctx``, does so within that step)."""
        self.held_turn_settings: tuple[Any, bool] | None = None
        self.warmup = EchoWarmUpHold(self)
        """Holds the caller's audio at the gate through LiveKit's AEC warm-up while user
        turns are held (the STT hears silence then)."""
        self.closing = False
        self.starting = False
        """``session.start`` is running (the embedding's guard raises a refusal after it)."""
        self._call_started = False
        """``SessionStarted`` was dispatched (at the first sign of the started agent)."""
        self._refusal: EmbeddingError | None = None
        """Strict: a refused early speech, raised by ``session.start`` once it returns."""
        self._refused: set[str] = set()
        """Early speeches reported so far, by agent method and call (one warning each)."""
        self._hang_ups: set[asyncio.Future[Any]] = set()
        """``end_call``'s awaitables: awaited to their end, even after the session closed
        (detaching cancels the levers' other futures, never a hang-up)."""
        self._segment_speeches: collections.deque[str | None] = collections.deque()
        self._tool_calls: dict[str, str] = {}
        """The speech of each running tool call, by call id: LiveKit's tool events do not
        name it, ``session.current_speech`` may already be cleared while a tool-only step
        runs, and a step's tool may await an ``AgentTask`` whose own tools run meanwhile."""
        self._queue: collections.deque[ev.Event] = collections.deque()
        self._dispatching = False
        self._thread: int | None = None
        """The thread of the session's event loop, the only one that may dispatch."""
        self._origin: float | None = None
        self._handlers: list[tuple[str, Callable[..., None]]] = []
        self._tasks: set[asyncio.Future[Any]] = set()
        self._reported_failures: set[tuple[str, type[BaseException]]] = set()
        self._running: tuple[fx.Effect, str] | None = None
        """The effect whose lever runs now, and the state it was emitted in."""
        # -- outcomes (effect_outcomes.py, interruption.py, outcomes.py) --
        self._outcome: PendingOutcome | None = None
        self._handling = 0
        """Session handlers running now (a strict breach is raised at the outermost's end)."""
        """The outcome of the effect whose lever runs now."""
        self.interruptions = InterruptionWatch(self._speech_interrupted)
        self.turn_ends = TurnEndWatch(self._guarded("end of turn", self._turn_ended))
        """LiveKit's ends of the caller's turns, before it decides on them."""
        self.tool_reply_holds = ToolReplyHolds()
        """The replies to tool output waiting for LiveKit's decision on a barge-in."""
        self.outcomes = OutcomeMonitor(self, strict=strict)
        """Checks what the session did (audio, history, tool rounds, input)."""
        self.prerendered = PrerenderedTexts(session)
        """The greeting, re-prompt and fallback synthesized ahead, while the call rings
        (prerender.py)."""
        self.realtime: RealtimeLink | None = None
        """Realtime models: the levers that hold there replace the pipeline's (realtime.py)."""
        self.levers: dict[type[fx.Effect], Lever] = dict(LEVERS)
        self.observers: list[Callable[[TraceStep], None]] = []
        """Called with every step, before its effects run (the telemetry: telemetry.py)."""
        self.call_meter = CallMeter(controller.policy)
        """The call's turn metrics, fed every step (the figures of the call's summary line,
        its meter instruments and its spans: telemetry.py)."""
        self.call_metrics: CallMetrics | None = None
        """The call's metrics, once the machine ended (and the call was reported)."""
        if isinstance(session.llm, llm.RealtimeModel):
            self.realtime = RealtimeLink(self)
            self.levers.update(self.realtime.levers)

    # -- lifecycle ----------------------------------------------------------------------

    def subscribe(self) -> None:
        """Listen to the session's events (done by :func:`attach`)."""
        if adapter_for(self.session) is not None:
            raise EmbeddingError(
                "a turnfsm controller is already attached to this session: attach one "
                "TurnController per session, once"
            )
        setattr(self.session, _ADAPTER_ATTRIBUTE, self)
        handlers: dict[str, Callable[[Any], None]] = {
            "agent_state_changed": self._on_agent_state_changed,
            "user_state_changed": self._on_user_state_changed,
            "user_input_transcribed": self._on_user_input_transcribed,
            "conversation_item_added": self._on_conversation_item_added,
            "speech_created": self._on_speech_created,
            "function_tools_executed": self._on_function_tools_executed,
            "agent_false_interruption": self._on_agent_false_interruption,
            "tool_execution_updated": self._on_tool_execution_updated,
            "error": self._on_error,
            "close": self._on_close,
        }
        for name, handler in handlers.items():
            guarded = self._guarded(name, handler)
            self.session.on(name, guarded)  # type: ignore[arg-type]
            self._handlers.append((name, guarded))

    def detach(self) -> None:
        """Stop listening, cancel timers, release the input and take the playout meter out
        of the output chain. Idempotent."""
        for name, handler in self._handlers:
            self.session.off(name, handler)  # type: ignore[arg-type]
        self._handlers.clear()
        unguard_start(self.session)
        stop_reporting_text_turns(self.session)
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        self._release_input()
        if self.meter is not None:
            self.meter.remove()
        self.interruptions.close()
        self.turn_ends.close()
        self.tool_reply_holds.close()
        self.outcomes.agreement.close()
        if self.realtime is not None:  # realtime: restore options, stop listening
            self.realtime.release()
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        if adapter_for(self.session) is self:
            delattr(self.session, _ADAPTER_ATTRIBUTE)

    @property
    def agent_running(self) -> bool:
        """The session runs an agent (it was started)."""
        return session_started(self.session)

    @property
    def attached(self) -> bool:
        """Session events reach the adapter (from :func:`attach` until :meth:`detach`)."""
        return bool(self._handlers)

    @property
    def dispatching(self) -> bool:
        """A run-to-completion step runs now (an event dispatched meanwhile waits for it)."""
        return self._dispatching

    @property
    def agent_hooks_active(self) -> bool:
        """The running agent is a :class:`~.agent.TurnAgent` (turn commits come from its
        hook); read per event, as a handoff may change the agent at any time."""
        return self.agent_running and bool(
            getattr(self.session.current_agent, "turnfsm_hooks", False)
        )

    def before_greeting(self) -> bool:
        """No greeting was started yet where the machine waits to greet (a reply made now
        would talk before the callee was greeted: the machine stops it)."""
        return self.controller.state in ("ringing", "awaiting_user") and (
            self.controller.policy.has_greeting
        )

    def now(self) -> float:
        """Seconds since the adapter started: the time stamped on every event."""
        loop_time = asyncio.get_running_loop().time()
        if self._origin is None:
            self._origin = loop_time
        return max(0.0, loop_time - self._origin)

    # -- the run-to-completion step -----------------------------------------------------

    def dispatch(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        """Feed an event to the controller, execute its effects and return them: the
        LiveKit callback that asked takes its decision from them (a turn to reject, a tool
        reply to cancel). ``()`` when the event waits behind the step running now
        (re-entered: it runs right after), or comes after :meth:`detach`.

        Use it for inputs the adapter cannot see itself, e.g.
        ``adapter.dispatch(CallAnswered(at=adapter.now()))`` for an outbound call placed
        without SIP status attributes.

        Like the session, the adapter belongs to its event loop's thread (the first to
        dispatch): from another thread, hand the event over with
        ``loop.call_soon_threadsafe(adapter.dispatch, event)``.

        Raises:
            ConcurrentUseError: called from another thread than the first dispatch's.
        """
        # -- turnfsm hardening (issue 11.4): one owner thread --------------------------
        caller = threading.get_ident()
        if self._thread is None:
            self._thread = caller
        elif caller != self._thread:
            raise ConcurrentUseError(
                f"TurnAdapter.dispatch called from thread {caller}, not from the session's "
                f"event loop thread {self._thread}: use loop.call_soon_threadsafe"
            )
        # -- end of the owner-thread check -----------------------------------------------
        if not self._handlers:
            logger.debug(
                "turnfsm: %s after detach ignored", event.name, extra={"event": event.name}
            )
            return ()
        self.outcomes.agreement.activity()
        self._queue.append(event)
        if self._dispatching:
            return ()
        self._dispatching = True
        try:
            effects = self._step(self._queue.popleft())  # this event's: the queue was empty
            while self._queue:  # events its levers caused
                self._step(self._queue.popleft())
        finally:
            self._dispatching = False
        self.outcomes.agreement.step_through()
        if not self._handling:  # strict: a breach the step revealed (in a handler: at its end)
            self.outcomes.raise_pending()
        return effects

    def trace_only(self, event: ev.Event) -> None:
        """Record an event the machine ignores in every state (an ``OutcomeBreached``):
        queued behind the step running now, else taken at once; unlike :meth:`dispatch`
        it never raises a strict breach, so the outcome monitor may call it from LiveKit's
        audio chain."""
        if self._dispatching:
            self._queue.append(event)
        elif self._handlers:
            self._step(event)

    def _step(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        before = self.controller.state
        try:
            effects = self.controller.handle(event)
        except Exception as error:
            self._controller_failed(event, before, error)
            self._release_input()
            return ()
        step = TraceStep(event.at, event, before, self.controller.state, effects)
        self.call_meter.add(step)
        if self.observers:
            self._observe(step)
        for effect in effects:
            self._execute(effect, before)
        self.outcomes.step(before, event, step.after, effects)
        if step.after == "ended" and self.call_metrics is None:
            self._call_ended()
        return effects

    def _call_ended(self) -> None:
        """The machine ended: report the call (its summary line and meter instruments),
        once its last effects ran and the outcome checks judged them."""
        self.call_metrics = self.call_meter.result()
        try:
            report_call(self.call_metrics, dict(self.outcomes.counts))
        except Exception as error:
            self._report_failure("call report", error, "the call ended")

    def _observe(self, step: TraceStep) -> None:
        for observer in self.observers:
            try:
                observer(step)
            except Exception as error:
                self._report_failure("step observer", error, f"{step.event.name} in {step.before}")

    def _execute(self, effect: fx.Effect, state: str) -> None:
        previous, self._running = self._running, (effect, state)
        previous_outcome = self._outcome
        self._outcome = outcome = PendingOutcome(effect, self.dispatch, self.now)
        try:
            self.levers[type(effect)](self, effect)
        except EffectRefused as refusal:
            logger.debug(
                "turnfsm: %s refused: %s",
                effect.name,
                refusal.detail,
                extra={"effect": effect.name, "state": state},
            )
            outcome.lever_refused(refusal.detail)
        except Exception as error:
            self._report_failure(f"lever {effect.name}", error, self._describe(effect, state))
            outcome.lever_failed(error)
            if isinstance(effect, fx.UnmuteInput | fx.ResumeUserTurns):
                self._release_input(
                    commit=isinstance(effect, fx.ResumeUserTurns) and effect.commit_pending
                )
        else:
            outcome.lever_returned()
        finally:
            self._running = previous
            self._outcome = previous_outcome

    def note_outcome_detail(self, detail: str) -> None:
        """For a lever: how it carried out its effect, said in its ``done`` outcome."""
        if self._outcome is None:
            raise RuntimeError("note_outcome_detail() is for a running lever")
        self._outcome.done_detail = detail

    def defer_outcome(self) -> PendingOutcome:
        """For a lever: its outcome is reported later, by its call site (``resolve``)."""
        if self._outcome is None:
            raise RuntimeError("defer_outcome() is for a running lever")
        return self._outcome.defer()

    def _describe(self, effect: fx.Effect, state: str) -> str:
        """The effect for a log line: its transcript text only if the controller keeps it."""
        return f"{redact(effect, keep_text=self.controller.keep_text)!r} in {state}"

    def _controller_failed(self, event: ev.Event, state: str, error: Exception) -> None:
        """Log a failing controller step with its traceback. Its message may quote the call
        (an invariant violation lists the step's effects): it is redacted unless kept."""
        shown = redact(error, keep_text=self.controller.keep_text)
        name = type(error).__name__
        if invariant := getattr(error, "invariant", None):
            name = f"{name} {invariant}"
        logger.error(
            "turnfsm: controller failed on %s in %s: %r\n%s",
            event.name,
            state,
            shown,
            "".join(traceback.format_tb(error.__traceback__)).rstrip(),
            extra={"event": event.name, "state": state, "error": name},
        )

    def _report_failure(self, where: str, error: BaseException, detail: str) -> None:
        """Log a failure of a lever, a handler or an observer once per error type, its
        message redacted unless text is kept (a plugin's error may quote its input)."""
        shown = redact(error, keep_text=self.controller.keep_text)
        key = (where, type(error))
        if key in self._reported_failures:
            logger.debug(
                "turnfsm: %s failed again: %r",
                where,
                shown,
                extra={"where": where, "error": type(error).__name__},
            )
            return
        self._reported_failures.add(key)
        logger.warning(
            "turnfsm: %s failed (%s): %r",
            where,
            detail,
            shown,
            extra={"where": where, "error": type(error).__name__},
        )

    def _release_input(self, *, commit: bool = False) -> None:
        """Whatever happened, the caller is heard again and user turns are committed;
        with ``commit`` (a failed ``ResumeUserTurns(commit_pending=True)``), what the
        caller said while they were held too: nothing else would commit it, as its end
        of speech came while turns were held, and the caller waits for an answer."""
        self.warmup.close()
        if self.gate is not None and self.gate.muted:
            self.gate.unmute(replay_held_audio=False)
        if self.held_turn_settings is not None:
            turn_detection, discard = self.held_turn_settings
            self.held_turn_settings = None
            try:
                self.session.options.interruption["discard_audio_if_uninterruptible"] = discard
                self.session.update_options(turn_detection=turn_detection)
            except Exception as error:
                self._report_failure("release input", error, "restoring turn detection")
        if commit:
            try:
                commit_held_turn(self)
            except Exception as error:
                self._report_failure("release input", error, "committing the held turn")

    def _guarded(
        self, name: str, handler: Callable[[Any], _R], *, session_event: bool = True
    ) -> Callable[[Any], _R | None]:
        """``handler`` as a LiveKit callback: its failure is logged, never raised into the
        session (``None`` then); its event is the one its steps answer (:attr:`site`).
        A ``session_event`` keeps the session from being quiet (O7)."""

        def guarded(event: Any) -> _R | None:
            if session_event and self._handlers:
                self.outcomes.agreement.activity()
            self._handling += 1
            site, self.site = self.site, event
            try:
                try:
                    result = handler(event)
                finally:
                    self._handling -= 1
                    self.site = site
                if not self._handling:  # strict: a breach, once the handler did its work
                    self.outcomes.raise_pending()
                return result
            except Exception as error:
                self._report_failure(f"handler {name}", error, type(event).__name__)
                return None

        guarded.__signature__ = _ONE_EVENT  # type: ignore[attr-defined]
        return guarded

    def guarded_call(self, name: str, call: Callable[[], object]) -> None:
        """Run ``call`` as a LiveKit callback would be (:meth:`_guarded`): its failure, or
        a strict outcome breach, is logged and never raised into the event loop."""
        self._guarded(name, lambda _: call(), session_event=False)(None)

    def track(self, awaitable: Awaitable[Any], what: str, *, hang_up: bool = False) -> None:
        """Keep a lever's future alive and log its failure instead of losing it (as a
        failure of the lever that started it, with its effect and state). Detaching
        cancels it, unless it is a ``hang_up`` (``end_call``'s), which runs to its end."""
        future = asyncio.ensure_future(awaitable)
        tasks = self._hang_ups if hang_up else self._tasks
        tasks.add(future)
        if self._outcome is not None:
            self._outcome.track(future)
        where, detail = what, "awaited lever"
        if self._running is not None:
            effect, state = self._running
            where, detail = f"lever {effect.name}", f"{self._describe(effect, state)}, {what}"

        def done(fut: asyncio.Future[Any]) -> None:
            tasks.discard(fut)
            if not fut.cancelled() and (error := fut.exception()) is not None:
                self._report_failure(where, error, detail)

        future.add_done_callback(done)

    @property
    def text_only(self) -> bool:
        """The session has no audio, in nor out: the caller types and reads (LiveKit's
        text testing, ``session.run(user_input=...)``). There is no audio to mute, and a
        speech reaches the caller as the text it sends."""
        session = self.session
        return (
            self.gate is None
            and self.meter is None
            and session.input.audio is None
            and session.output.audio is None
        )

    def require_gate(self) -> InputGate:
        """The input gate, or an error naming why it is missing."""
        if self.gate is None:
            raise RuntimeError("the session has no audio input to mute")
        return self.gate

    def timer_expired(self, timer: fx.TimerName) -> None:
        """A ``loop.call_later`` timer expired: hand it to the machine."""
        self.timers.pop(timer, None)
        self._guarded("timer", self.dispatch)(ev.timer_expired(timer, at=self.now()))

    # -- session events -----------------------------------------------------------------

    def _on_agent_state_changed(self, event: AgentStateChangedEvent) -> None:
        if event.old_state == "initializing":
            self._start_call()
        if event.new_state == "speaking":
            self.warmup.agent_speaking()
        if event.new_state == "speaking" and (speech := self.session.current_speech):
            self.dispatch(ev.AgentSpeechStarted(at=self.now(), speech_id=speech.id))
        self.outcomes.agreement.agent_state_changed(event.new_state)

    def _start_call(self) -> None:
        """The session's agent runs: put the audio links in place and tell the machine,
        once. LiveKit starts the agent (and its ``on_enter``) before it leaves
        ``initializing``: a speech ``on_enter`` asks for comes first, and is the agent's,
        in the started call."""
        if self._call_started or not self.agent_running:
            return  # (an activity driven without session.start runs no agent: no call)
        self._call_started = True
        self._install_audio_links()
        if self.realtime is None and not self.text_only:
            self.prerendered.start_call(self.controller.policy)
        self._tell_interruption_settings()
        self.dispatch(ev.SessionStarted(at=self.now()))

    def _tell_interruption_settings(self) -> None:
        """The session's interruption settings, as LiveKit reads them at a turn's end:
        its ``min_words``, and whether the running agent hears through an STT (LiveKit
        counts words only then) and its turn detection is manual (then it counts none)."""
        session = self.session
        options = session.options.interruption
        agent = session.current_agent
        stt = agent.stt if utils.is_given(agent.stt) else session.stt
        turn_detection = (
            agent.turn_detection
            if utils.is_given(agent.turn_detection)
            else session.turn_detection
        )
        self.dispatch(
            ev.InterruptionSettings(
                at=self.now(),
                min_words=int(options["min_words"]),
                stt=stt is not None,
                manual_turns=turn_detection == "manual",
            )
        )

    def _install_audio_links(self) -> None:
        session = self.session
        if self.realtime is not None:  # realtime: subscribe to the model's session
            self.realtime.bind()
        # the gate only where the machine may mute or hold audio (realtime server turns
        # are held at the gate): any other input stays the session's own object
        gated = (
            self.controller.policy.can_mute_input
            or self.realtime is not None
            or self.warmup.needs_gate()
        )
        if session.input.audio is not None and self.gate is None and gated:
            self.gate = InputGate(session.input.audio)
            session.input.audio = self.gate
        if session.output.audio is not None and self.meter is None:
            self.meter = measure_playout(
                session.output,
                on_segment_start=self._on_segment_start,
                on_segment=self._on_segment,
            )

    def _on_segment_start(self) -> None:
        speech = self.session.current_speech
        self._segment_speeches.append(speech.id if speech is not None else None)
        self.outcomes.segment_started(speech.id if speech is not None else None)

    def _on_segment(self, segment: PlayedSegment) -> None:
        speech_id = self._segment_speeches.popleft() if self._segment_speeches else None
        self.outcomes.segment_finished(speech_id, segment)
        if speech_id is not None:
            self.last_segment[speech_id] = segment
            self.played_seconds[speech_id] = (
                self.played_seconds.get(speech_id, 0.0) + segment.played_seconds
            )

    def _on_user_state_changed(self, event: UserStateChangedEvent) -> None:
        if event.new_state == "speaking":
            self.transcript_final = False
            self.dispatch(ev.UserSpeechStarted(at=self.now()))
        elif event.old_state == "speaking":
            self.dispatch(ev.UserSpeechEnded(at=self.now()))
        self.outcomes.agreement.user_state_changed(event.old_state, event.new_state)

    def _on_user_input_transcribed(self, event: UserInputTranscribedEvent) -> None:
        if event.is_final:
            self.transcript_final = True
        self.dispatch(
            ev.UserTranscript(at=self.now(), text=event.transcript, is_final=event.is_final)
        )

    def _on_conversation_item_added(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.AgentHandoff):
            self._agent_handed_over()
            if self.realtime is not None:  # the new activity may open a new session
                self.track(self.realtime.follow_handoff(), "realtime link after a handoff")
            return
        if not isinstance(item, llm.ChatMessage):
            return
        if item.role == "user" and self.realtime is not None and self.realtime.owns_user_turns:
            self.realtime.user_item(item)  # server turn detection: no TurnAgent hook runs
        elif item.role == "user" and item.id in self._typed_turns:
            self._typed_turns.discard(item.id)  # reported as it was typed
        elif item.role == "user" and not self.agent_hooks_active:
            self.dispatch(
                ev.UserTurnCommitted(at=self.now(), text=item.text_content or "", item_id=item.id)
            )
        elif item.role == "assistant":
            speech = self.session.current_speech
            speech_id = speech.id if speech is not None else ""
            self.assistant_messages[speech_id] = item
            if item.interrupted:
                self._restore_full_text(speech_id, item)
            self.dispatch(
                ev.AssistantMessageCommitted(
                    at=self.now(),
                    item_id=item.id,
                    speech_id=speech_id,
                    text=item.text_content or "",
                    # realtime: a reply whose audio was cut short by the model (a failed
                    # or cancelled response, a lost connection) is cut as an interrupted one
                    interrupted=item.interrupted
                    or (self.realtime is not None and self.realtime.cut_short(item.id)),
                )
            )

    def _agent_handed_over(self) -> None:
        """A handoff made a new agent current (LiveKit reports it before starting it).

        LiveKit built the new agent's activity when the handoff began, with the turn
        detection of that moment: user turns held or released since then (the greeting
        started or ended while the old agent drained) would not hold for the new agent,
        which then never commits a turn. The session's setting is put on it again. An
        agent with its own ``turn_detection`` keeps it.
        """
        agent = self.session.current_agent
        if utils.is_given(agent.turn_detection):
            return
        # what the new activity was built with (LiveKit 1.8.9 keeps it there): put the
        # session's setting on it only when a hold began or ended meanwhile, since
        # re-setting it makes LiveKit open a second turn-detector stream
        activity = getattr(self.session, "_activity", None)
        built_held = getattr(activity, "_turn_detection", None) == "manual"
        if built_held != (self.session.turn_detection == "manual"):
            self.session.update_options(turn_detection=self.session.turn_detection)

    def _restore_full_text(self, speech_id: str, item: llm.ChatMessage) -> None:
        """Commit an interrupted reply in full, whatever the output chain.

        A ``TranscriptSynchronizer`` makes LiveKit commit only the synchronized prefix of
        an interrupted reply; without one it commits the full text. The machine decides
        what an interrupted reply keeps (``interrupted_text``), so the adapter hands it
        the same full message either way. Not for realtime models, whose server-side
        item LiveKit truncates to the played audio.
        """
        full = self.forwarded_texts.get(speech_id)
        committed = " ".join((item.text_content or "").split())
        if full is None or isinstance(reply_model(self.session), llm.RealtimeModel):
            return
        if " ".join(full.split()).startswith(committed) and committed != " ".join(full.split()):
            item.content = [full]

    def forwarded_text(self, speech_id: str, delta: str) -> None:
        """Report text of ``speech_id`` forwarded to the transcript (``TurnAgent``)."""
        self.forwarded_texts[speech_id] = self.forwarded_texts.get(speech_id, "") + delta

    def _on_speech_created(self, event: SpeechCreatedEvent) -> None:
        self._start_call()  # e.g. asked for in on_enter, before LiveKit leaves initializing
        self.outcomes.agreement.speech_created(event.speech_handle)
        if self.realtime is not None and self.realtime.intercept_speech(event):
            return  # realtime: a server reply cancelled before it plays (see realtime.py)
        handle = event.speech_handle
        self.speeches[handle.id] = handle
        handle.add_done_callback(self._on_speech_done)
        self.interruptions.watch(handle)
        if self._outcome is not None and self._outcome.speech_id is None:
            self._outcome.speech_id = handle.id  # the speech this lever created
        source: Literal["say", "reply"] = "say" if event.source == "say" else "reply"
        # asked for while the agent's own code runs (its on_enter, or its turn hook after
        # turnfsm's report), by no lever of turnfsm: LiveKit's own replies come outside
        # them (LiveKit 1.8.9 marks even those ``user_initiated``)
        entering = entering_agent()
        in_agent_code = entering is not None or self.agent_hook is not None
        from_agent_code = in_agent_code and self._running is None
        before = self.controller.state
        effects = self.dispatch(
            ev.AgentSpeechCreated(
                at=self.now(),
                speech_id=handle.id,
                source=source,
                from_agent_code=from_agent_code,
            )
        )
        stopped = any(
            isinstance(effect, fx.Interrupt) and effect.speech_id in (None, handle.id)
            for effect in effects
        )
        if from_agent_code and stopped and before in BEFORE_FIRST_WORDS:
            call = "session.say" if event.source == "say" else "session.generate_reply"
            if entering is not None:
                speaker = f"{type(entering).__name__}.on_enter"
            else:
                speaker = f"{type(self.session.current_agent).__name__}.on_user_turn_completed"
            self._refuse_early_speech(speaker, call)

    def _refuse_early_speech(self, speaker: str, call: str) -> None:
        """The agent's code (``speaker``, e.g. ``Assistant.on_enter``) spoke before the
        caller's first words and the machine stopped it: say so, once per method and call
        (strict: raise it, from ``session.start`` when it is still starting)."""
        refusal = early_speech_refusal(self.controller.policy, speaker, call)
        if self.outcomes.strict:
            if self.starting:
                self._refusal = self._refusal or refusal
                return
            raise refusal
        if f"{speaker} {call}" in self._refused:
            return
        self._refused.add(f"{speaker} {call}")
        logger.warning("turnfsm: %s", refusal, extra={"where": speaker, "call": call})

    def raise_refusal(self) -> None:
        """Strict: raise the early speech refused while the session was starting."""
        refusal, self._refusal = self._refusal, None
        if refusal is not None:
            raise refusal

    def _on_speech_done(self, handle: SpeechHandle) -> None:
        if self.realtime is not None:
            self.realtime.speech_done(handle)  # the greeting's outcome comes before its end
        try:
            self.interruptions.settle(handle)  # reported before its end
            segment = self.last_segment.get(handle.id)
            self.speaking_rates.speech_played(segment, self.assistant_messages.get(handle.id))
            played_seconds = self.played_seconds.get(handle.id, 0.0)
            played_text = segment.synchronized_transcript if segment else None
            if self.text_only:
                played_text, played_seconds = self._text_sent(handle.id)
            self.dispatch(
                ev.AgentSpeechEnded(
                    at=self.now(),
                    speech_id=handle.id,
                    interrupted=handle.interrupted,
                    played_seconds=played_seconds,
                    played_text=played_text,
                )
            )
        except Exception as error:
            self._report_failure("speech done", error, handle.id)
        self.tool_reply_holds.release(handle.id, send=False)  # no reply of it is to come
        for table in (self.speeches, self.assistant_messages, self.last_segment):
            table.pop(handle.id, None)
        self.played_seconds.pop(handle.id, None)
        self.forwarded_texts.pop(handle.id, None)
        for call_id in [c for c, speech in self._tool_calls.items() if speech == handle.id]:
            del self._tool_calls[call_id]

    def _text_sent(self, speech_id: str) -> tuple[str | None, float]:
        """What a text-only session's caller got of a speech: the text it sent (no audio
        plays), and how long it takes to say at LiveKit's standard rate (so a reply that
        said something is never taken for a silent one)."""
        sent = self.forwarded_texts.get(speech_id)
        if sent is None and (message := self.assistant_messages.get(speech_id)) is not None:
            sent = message.text_content
        return sent, estimated_seconds(sent) if sent else 0.0

    def _current_speech_id(self) -> str:
        speech = self.session.current_speech
        return speech.id if speech is not None else ""

    def _on_tool_execution_updated(self, event: ToolExecutionUpdatedEvent) -> None:
        update = event.update
        if not isinstance(update, ToolCallStarted):
            return
        speech_id = self._current_speech_id()
        step_running = speech_id in self._tool_calls.values()  # a parallel call of it
        self._tool_calls[update.function_call.call_id] = speech_id
        self.outcomes.agreement.tool_step(running=True)
        if step_running:
            return
        # the machine hears how each turn the caller ends meanwhile is counted
        self.turn_ends.watch(getattr(self.session, "_activity", None))
        self.dispatch(ev.ToolStepStarted(at=self.now(), speech_id=speech_id, calls=1))

    def _on_function_tools_executed(self, event: FunctionToolsExecutedEvent) -> None:
        calls = max(1, len(event.function_calls))
        started = [self._tool_calls.pop(c.call_id, None) for c in event.function_calls]
        # a step of an AgentTask nested in a tool's step ends while the outer one runs on
        self.outcomes.agreement.tool_step(running=bool(self._tool_calls))
        speech_id = next((speech for speech in started if speech is not None), None)
        if speech_id is None:  # its start was not seen
            speech_id = self._current_speech_id()
            self.dispatch(ev.ToolStepStarted(at=self.now(), speech_id=speech_id, calls=calls))
        self.tool_reply_holds.step_finished(speech_id)
        self.dispatch(
            ev.ToolStepFinished(
                at=self.now(),
                speech_id=speech_id,
                calls=calls,
                hands_over=event.has_agent_handoff,
            )
        )

    def _on_agent_false_interruption(self, event: AgentFalseInterruptionEvent) -> None:
        self._turn_declined("false_interruption")

    def _on_error(self, event: ErrorEvent) -> None:
        error = event.error
        self.dispatch(
            ev.SessionError(
                at=self.now(),
                message=type(error).__name__,
                recoverable=bool(getattr(error, "recoverable", True)),
            )
        )

    def _on_close(self, event: CloseEvent) -> None:
        self.closing = True
        self.prerendered.close()
        self.dispatch(ev.CallEnded(at=self.now(), reason=str(event.reason.value)))
        self.detach()

    # -- call sites used by TurnAgent ---------------------------------------------------

    def user_turn_completed(
        self, turn_ctx: llm.ChatContext, message: llm.ChatMessage
    ) -> UserTurnHook | None:
        """Report a committed user turn from ``on_user_turn_completed``, before LiveKit
        replies from ``turn_ctx``. Returns the hook's call site, to be ended with
        :meth:`user_turn_hook_ended` once the agent's own hook ran; ``None`` when this
        turn was reported already (by the wrapper of an agent's own hook that calls
        ``super()``).

        Raises:
            StopResponse: the machine rejected the turn: no reply, not in the history.
        """
        if message.id == self._reported_turn:
            return None
        self._reported_turn = message.id
        hook = UserTurnHook(turn_ctx, message)
        effects = self._guarded("on_user_turn_completed", self._commit_user_turn)(hook)
        if effects is not None and fx.RejectUserTurn(item_id=message.id) in effects:
            self._turn_declined("rejected", message.id)
            raise StopResponse()
        self.agent_hook = hook
        return hook

    def text_turn(self, hook: UserTurnHook) -> tuple[fx.Effect, ...]:
        """Report a typed user turn (``generate_reply(user_input=...)``: no
        ``on_user_turn_completed`` runs for it) before LiveKit replies from
        ``hook.turn_ctx``; end it with :meth:`user_turn_hook_ended` once the reply was
        asked for. Returns the step's effects (``()`` if it failed: logged)."""
        self._reported_turn = hook.message.id
        self._typed_turns.add(hook.message.id)
        effects = self._guarded("generate_reply", self._commit_user_turn)(hook)
        return effects if effects is not None else ()

    def _commit_user_turn(self, hook: UserTurnHook) -> tuple[fx.Effect, ...]:
        text, item_id = hook.message.text_content or "", hook.message.id
        return self.dispatch(ev.UserTurnCommitted(at=self.now(), text=text, item_id=item_id))

    def user_turn_hook_ended(self, hook: UserTurnHook, error: BaseException | None) -> None:
        """The agent's ``on_user_turn_completed`` is through (``error``: what it raised):
        the greeting asked of its reply is reported done, or refused."""
        self.agent_hook = None
        self._guarded("on_user_turn_completed", lambda _: hook.ended(error))(hook)
        if isinstance(error, Exception):  # LiveKit does not reply (StopResponse, or a failure)
            self._turn_declined("stopped_by_agent", hook.message.id)

    def _turn_declined(self, reason: ev.TurnDeclineReason, item_id: str = "") -> None:
        """LiveKit will not answer the caller: the machine hears it, with the reply LiveKit
        prepared for the turn, which it leaves parked (the one speech not scheduled:
        LiveKit schedules every other as it creates it)."""
        prepared = [
            handle.id
            for handle in self.speeches.values()
            if not handle.done() and not handle.scheduled
        ]
        declined = ev.UserTurnDeclined(
            at=self.now(),
            reason=reason,
            item_id=item_id,
            prepared_speech_id=prepared[-1] if prepared else "",
        )
        self._guarded("user turn declined", self.dispatch)(declined)

    def _turn_ended(self, turn_end: TurnEnd) -> None:
        """LiveKit ends the caller's turn: the machine hears its word count first, and
        may decline it (the ``RejectUserTurn`` lever, at this site)."""
        self.dispatch(ev.UserTurnEnded(at=self.now(), words=turn_end.words))

    def _speech_interrupted(self, speech_id: str) -> None:
        self.dispatch(ev.AgentSpeechInterrupted(at=self.now(), speech_id=speech_id))
