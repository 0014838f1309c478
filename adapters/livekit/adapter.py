"""The LiveKit adapter: session events in, turn-machine effects out.

Embedding: before ``session.start(...)`` (every step of a real call, in order, is in the
README's "Embedding"; a missing piece is refused: :mod:`.embedding`)::

    controller = TurnController(policy)
    attach(session, controller, end_call=hang_up_room(ctx))

The adapter subscribes to the session's events, translates each into a
:mod:`turnfsm.events` event (:mod:`.translate`, whose table says which), hands it to the
dispatcher (:mod:`.dispatch`), which feeds the controller and executes the returned
effects in order with :data:`~turnfsm.adapters.livekit.levers.LEVERS`, each lever given
the port it acts through and its site (:mod:`.port`). Events raised while effects run
(LiveKit emits ``speech_created`` inside ``session.say``) are queued and handled right
after, in the same callback: the machine runs to completion one event at a time.

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

Which LiveKit event becomes which machine event is the translator's table
(:mod:`.translate`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from livekit.agents import Agent, AgentSession, StopResponse, llm, utils
from livekit.agents.voice import SpeechHandle, agent_activity
from livekit.agents.voice.events import (
    AgentFalseInterruptionEvent,
    AgentStateChangedEvent,
    CloseEvent,
    ConversationItemAddedEvent,
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
from turnfsm.tools.metrics import CallMeter, CallMetrics
from turnfsm.trace import TraceStep

from . import translate
from .audio import InputGate, PlayedSegment, measure_playout
from .dispatch import Dispatcher
from .embedding import (
    EmbeddingError,
    check_attach,
    claim,
    early_speech_refusal,
    guard_start,
    session_started,
    unguard_start,
)
from .interruption import InterruptionWatch, ToolReplyHolds, TurnEnd, TurnEndWatch
from .levers import LEVERS
from .log import logger
from .outcomes import OutcomeMonitor
from .port import EndCall, Lever, LeverPort
from .prerender import PrerenderedTexts
from .realtime import RealtimeLink
from .realtime_levers import RealtimeLevers
from .text import estimated_seconds
from .text_turns import report_text_turns, stop_reporting_text_turns
from .turn_hook import UserTurnHook, reply_model
from .warmup import EchoWarmUpHold

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


class TurnAdapter:
    """Connects one ``AgentSession`` to one :class:`~turnfsm.TurnController`.

    Three rooms and a port: its handlers take LiveKit's events and keep the registries
    (speeches, messages, played segments, tool calls), the translator (:mod:`.translate`)
    makes machine events of LiveKit's objects, the dispatcher (:mod:`.dispatch`) runs
    the machine and its levers, and the levers act through the port (:mod:`.port`).
    """

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
        self.port = LeverPort(
            session, controller.policy, end_call=end_call, timer_expired=self.timer_expired
        )
        """What the levers act on (the gate, the meter, the registries, the timers)."""
        self.outcomes = OutcomeMonitor(self, strict=strict)
        """Checks what the session did (audio, history, tool rounds, input)."""
        self.dispatcher = Dispatcher(controller, self.port, self.outcomes, dict(LEVERS))
        """The run-to-completion step, the levers' outcomes and the failure log."""
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
        self.forwarded_texts: dict[str, str] = {}
        """Each speech's text as forwarded to the transcript (reported by
        :class:`~.agent.TurnAgent`): what LiveKit commits without a synchronizer."""
        self.played_seconds: dict[str, float] = {}
        self.starting = False
        """``session.start`` is running (the embedding's guard raises a refusal after it)."""
        self._call_started = False
        """``SessionStarted`` was dispatched (at the first sign of the started agent)."""
        self._refusal: EmbeddingError | None = None
        """Strict: a refused early speech, raised by ``session.start`` once it returns."""
        self._refused: set[str] = set()
        """Early speeches reported so far, by agent method and call (one warning each)."""
        self._segment_speeches: collections.deque[str | None] = collections.deque()
        self._tool_calls: dict[str, str] = {}
        """The speech of each running tool call, by call id: LiveKit's tool events do not
        name it, ``session.current_speech`` may already be cleared while a tool-only step
        runs, and a step's tool may await an ``AgentTask`` whose own tools run meanwhile."""
        self._handlers: list[tuple[str, Callable[..., None]]] = []
        self.interruptions = InterruptionWatch(self._speech_interrupted)
        self.turn_ends = TurnEndWatch(self.dispatcher.guarded("end of turn", self._turn_ended))
        """LiveKit's ends of the caller's turns, before it decides on them."""
        self.realtime: RealtimeLink | None = None
        """Realtime models: the model's protocol tracker (realtime.py)."""
        self.realtime_levers: RealtimeLevers | None = None
        """Realtime models: the levers that hold there, in place of the pipeline's."""
        if isinstance(session.llm, llm.RealtimeModel):
            self.realtime = RealtimeLink(self.port, self.dispatcher)
            self.realtime_levers = RealtimeLevers(self.realtime, self.port)
            self.dispatcher.levers.update(self.realtime_levers.levers)

    # -- what the port and the dispatcher hold, for the embedding and its tests ---------

    @property
    def levers(self) -> dict[type[fx.Effect], Lever]:
        """Every effect type's lever, as the dispatcher runs them (replaceable)."""
        return self.dispatcher.levers

    @property
    def observers(self) -> list[Callable[[TraceStep], None]]:
        """Called with every step, before its effects run (the telemetry: telemetry.py)."""
        return self.dispatcher.observers

    @property
    def call_meter(self) -> CallMeter:
        """The call's turn metrics, fed every step (telemetry.py)."""
        return self.dispatcher.call_meter

    @property
    def call_metrics(self) -> CallMetrics | None:
        """The call's metrics, once the machine ended (and the call was reported)."""
        return self.dispatcher.call_metrics

    @property
    def gate(self) -> InputGate | None:
        """The input gate, if the session's input has one (:attr:`.LeverPort.gate`)."""
        return self.port.gate

    @property
    def closing(self) -> bool:
        """The session is closing: the call is over."""
        return self.port.closing

    @property
    def speeches(self) -> dict[str, SpeechHandle]:
        """The session's speeches not done yet, by id."""
        return self.port.speeches

    @property
    def assistant_messages(self) -> dict[str, llm.ChatMessage]:
        """The assistant message committed for each speech not done yet, by speech id."""
        return self.port.assistant_messages

    @property
    def held_turn_settings(self) -> tuple[Any, bool] | None:
        """What ``HoldUserTurns`` replaced, while user turns are held."""
        return self.port.held_turn_settings

    @property
    def warmup(self) -> EchoWarmUpHold:
        """The hold of the caller's audio through LiveKit's AEC warm-up."""
        return self.port.warmup

    @property
    def prerendered(self) -> PrerenderedTexts:
        """The greeting, re-prompt and fallback synthesized ahead, while the call rings
        (prerender.py)."""
        return self.port.prerendered

    @property
    def tool_reply_holds(self) -> ToolReplyHolds:
        """The replies to tool output waiting for LiveKit's decision on a barge-in."""
        return self.port.tool_reply_holds

    @property
    def end_call(self) -> EndCall | None:
        """How the call hangs up (:func:`attach`'s ``end_call``)."""
        return self.port.end_call

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
            "close": self._on_close,
        }
        for name, translation in translate.TRANSLATIONS.items():
            handlers[name] = self._translated(translation)
        for name, handler in handlers.items():
            guarded = self.dispatcher.guarded(name, handler)
            self.session.on(name, guarded)  # type: ignore[arg-type]
            self._handlers.append((name, guarded))
        self.dispatcher.attached = True

    def _translated(self, translation: Callable[[Any, float], ev.Event]) -> Callable[[Any], None]:
        """A handler that dispatches what ``translation`` makes of its event."""

        def handler(event: Any) -> None:
            self.dispatch(translation(event, self.now()))

        return handler

    def detach(self) -> None:
        """Stop listening, cancel timers, release the input and take the playout meter out
        of the output chain. Idempotent."""
        for name, handler in self._handlers:
            self.session.off(name, handler)  # type: ignore[arg-type]
        self._handlers.clear()
        self.dispatcher.attached = False
        unguard_start(self.session)
        stop_reporting_text_turns(self.session)
        for handle in self.port.timers.values():
            handle.cancel()
        self.port.timers.clear()
        self.dispatcher.release_input()
        if self.port.meter is not None:
            self.port.meter.remove()
        self.interruptions.close()
        self.turn_ends.close()
        self.tool_reply_holds.close()
        self.outcomes.agreement.close()
        if self.realtime_levers is not None:  # realtime: restore options, stop listening
            self.realtime_levers.release()
        self.dispatcher.cancel_tasks()
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
        return self.dispatcher.dispatching

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
        return self.dispatcher.now()

    # -- the run-to-completion step (the dispatcher's) ----------------------------------

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
        return self.dispatcher.dispatch(event)

    def trace_only(self, event: ev.Event) -> None:
        """Record an event the machine ignores in every state (:meth:`.Dispatcher.trace_only`)."""
        self.dispatcher.trace_only(event)

    def guarded_call(self, name: str, call: Callable[[], object]) -> None:
        """Run ``call`` as a LiveKit callback would be: its failure, or a strict outcome
        breach, is logged and never raised into the event loop."""
        self.dispatcher.guarded_call(name, call)

    def timer_expired(self, timer: fx.TimerName) -> None:
        """A ``loop.call_later`` timer expired: hand it to the machine."""
        self.port.timers.pop(timer, None)
        self.dispatcher.guarded("timer", self.dispatch)(ev.timer_expired(timer, at=self.now()))

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
        if self.realtime is None and not self.port.text_only:
            self.prerendered.start_call(self.controller.policy)
        self.dispatch(translate.interruption_settings(self.session, self.now()))
        self.dispatch(ev.SessionStarted(at=self.now()))

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
        if session.input.audio is not None and self.port.gate is None and gated:
            self.port.gate = InputGate(session.input.audio)
            session.input.audio = self.port.gate
        if session.output.audio is not None and self.port.meter is None:
            self.port.meter = measure_playout(
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
            self.port.last_segment[speech_id] = segment
            self.played_seconds[speech_id] = (
                self.played_seconds.get(speech_id, 0.0) + segment.played_seconds
            )

    def _on_user_state_changed(self, event: UserStateChangedEvent) -> None:
        if event.new_state == "speaking":
            self.port.transcript_final = False
        if (speech := translate.user_speech(event, self.now())) is not None:
            self.dispatch(speech)
        self.outcomes.agreement.user_state_changed(event.old_state, event.new_state)

    def _on_user_input_transcribed(self, event: UserInputTranscribedEvent) -> None:
        if event.is_final:
            self.port.transcript_final = True
        self.dispatch(translate.transcript(event, self.now()))

    def _on_conversation_item_added(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.AgentHandoff):
            self._agent_handed_over()
            if self.realtime_levers is not None:  # the new activity may open a new session
                following = self.realtime_levers.follow_handoff()
                self.port.track(following, "realtime link after a handoff")
            return
        if not isinstance(item, llm.ChatMessage):
            return
        if item.role == "user" and self.realtime is not None and self.realtime.owns_user_turns:
            self.realtime.user_item(item)  # server turn detection: no TurnAgent hook runs
        elif item.role == "user" and item.id in self._typed_turns:
            self._typed_turns.discard(item.id)  # reported as it was typed
        elif item.role == "user" and not self.agent_hooks_active:
            self.dispatch(translate.user_turn(item, self.now()))
        elif item.role == "assistant":
            speech = self.session.current_speech
            speech_id = speech.id if speech is not None else ""
            self.port.assistant_messages[speech_id] = item
            if item.interrupted:
                self._restore_full_text(speech_id, item)
            cut_short = self.realtime is not None and self.realtime.cut_short(item.id)
            self.dispatch(
                translate.assistant_message(item, speech_id, self.now(), cut_short=cut_short)
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
        self.port.speeches[handle.id] = handle
        handle.add_done_callback(self._on_speech_done)
        self.interruptions.watch(handle)
        self.dispatcher.speech_created(handle.id)  # a running lever's, if one runs
        # asked for while the agent's own code runs (its on_enter, or its turn hook after
        # turnfsm's report), by no lever of turnfsm: LiveKit's own replies come outside
        # them (LiveKit 1.8.9 marks even those ``user_initiated``)
        entering = entering_agent()
        in_agent_code = entering is not None or self.agent_hook is not None
        from_agent_code = in_agent_code and not self.dispatcher.lever_running
        before = self.controller.state
        effects = self.dispatch(
            translate.speech_created(event, self.now(), from_agent_code=from_agent_code)
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
            segment = self.port.last_segment.get(handle.id)
            self.port.speaking_rates.speech_played(
                segment, self.port.assistant_messages.get(handle.id)
            )
            played_seconds = self.played_seconds.get(handle.id, 0.0)
            if self.port.text_only:
                played_seconds = self._text_seconds(handle.id)
            self.dispatch(
                translate.speech_ended(handle, self.now(), played_seconds=played_seconds)
            )
        except Exception as error:
            self.dispatcher.report_failure("speech done", error, handle.id)
        self.tool_reply_holds.release(handle.id, send=False)  # no reply of it is to come
        for table in (self.speeches, self.assistant_messages, self.port.last_segment):
            table.pop(handle.id, None)
        self.played_seconds.pop(handle.id, None)
        self.forwarded_texts.pop(handle.id, None)
        for call_id in [c for c, speech in self._tool_calls.items() if speech == handle.id]:
            del self._tool_calls[call_id]

    def _text_seconds(self, speech_id: str) -> float:
        """How long the text a text-only session sent of a speech takes to say at
        LiveKit's standard rate (no audio plays): a reply that said something is never
        taken for a silent one."""
        sent = self.forwarded_texts.get(speech_id)
        if sent is None and (message := self.assistant_messages.get(speech_id)) is not None:
            sent = message.text_content
        return estimated_seconds(sent) if sent else 0.0

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
        started = [self._tool_calls.pop(c.call_id, None) for c in event.function_calls]
        # a step of an AgentTask nested in a tool's step ends while the outer one runs on
        self.outcomes.agreement.tool_step(running=bool(self._tool_calls))
        speech_id = next((speech for speech in started if speech is not None), None)
        if speech_id is None:  # its start was not seen
            speech_id = self._current_speech_id()
            calls = translate.tool_calls(event)
            self.dispatch(ev.ToolStepStarted(at=self.now(), speech_id=speech_id, calls=calls))
        self.port.tool_reply_holds.step_finished(speech_id)
        self.dispatch(translate.tool_step_finished(event, speech_id, self.now()))

    def _on_agent_false_interruption(self, event: AgentFalseInterruptionEvent) -> None:
        self._turn_declined("false_interruption")

    def _on_close(self, event: CloseEvent) -> None:
        self.port.closing = True
        self.prerendered.close()
        self.dispatch(translate.call_ended(event, self.now()))
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
        effects = self.dispatcher.guarded("on_user_turn_completed", self._commit_user_turn)(hook)
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
        effects = self.dispatcher.guarded("generate_reply", self._commit_user_turn)(hook)
        return effects if effects is not None else ()

    def _commit_user_turn(self, hook: UserTurnHook) -> tuple[fx.Effect, ...]:
        return self.dispatch(translate.user_turn(hook.message, self.now()))

    def user_turn_hook_ended(self, hook: UserTurnHook, error: BaseException | None) -> None:
        """The agent's ``on_user_turn_completed`` is through (``error``: what it raised):
        the greeting asked of its reply is reported done, or refused."""
        self.agent_hook = None
        self.dispatcher.guarded("on_user_turn_completed", lambda _: hook.ended(error))(hook)
        if isinstance(error, Exception):  # LiveKit does not reply (StopResponse, or a failure)
            self._turn_declined("stopped_by_agent", hook.message.id)

    def _turn_declined(self, reason: ev.TurnDeclineReason, item_id: str = "") -> None:
        """LiveKit will not answer the caller: the machine hears it, with the reply LiveKit
        prepared for the turn, which it leaves parked (the one speech not scheduled:
        LiveKit schedules every other as it creates it)."""
        speeches = self.port.speeches.values()
        declined = translate.turn_declined(reason, item_id, speeches, self.now())
        self.dispatcher.guarded("user turn declined", self.dispatch)(declined)

    def _turn_ended(self, turn_end: TurnEnd) -> None:
        """LiveKit ends the caller's turn: the machine hears its word count first, and
        may decline it (the ``RejectUserTurn`` lever, at this site)."""
        self.dispatch(translate.turn_ended(turn_end, self.now()))

    def _speech_interrupted(self, speech_id: str) -> None:
        self.dispatch(translate.speech_interrupted(speech_id, self.now()))
