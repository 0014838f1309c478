"""Run one drawn call on the virtual clock, in a real ``AgentSession``, and record it.

:func:`run_call` builds the :class:`~turnfsm.adapters.sim.SimulatedCall` that a
:class:`~.draw.CallPlan` describes (silero VAD, scripted models at the drawn pace, the
drawn LiveKit settings), attaches a strict turnfsm controller the way an application
does (:func:`~turnfsm.adapters.livekit.attach`), plays the caller's cues (their lines
made with :func:`~turnfsm.adapters.sim.speech.spoken_line`), asks the no-deaf-call probe,
hangs up, and returns a :class:`CallRecord`: what the caller heard and what the session
kept, measured beside turnfsm rather than read from it.

How speech is told apart: the harness's agent notes each generation step of a speech
(its ``tts_node``) and its TTS each rendered text (``synthesize``), under the speech that
LiveKit runs them for (its ``_SpeechHandleContextVar``, the one private LiveKit name used
here); its audio output notes which speech each playout segment belongs to
(``session.current_speech`` when the segment's first frame arrives, as LiveKit's own
sinks do). From the renders' lengths and a segment's played seconds the judges know
which words were played to their end (:mod:`.judge`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from livekit import rtc
from livekit.agents import Agent, AgentSession, RunContext, function_tool, llm, tts
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions
from livekit.agents.voice.agent import ModelSettings
from livekit.agents.voice.agent_activity import _SpeechHandleContextVar

from turnfsm import InvariantViolation, TurnController
from turnfsm import effects as fx
from turnfsm.events import CallAnswered, CallEnded, Event
from turnfsm.rules import TurnRules
from turnfsm.trace import Trace

from ...livekit import TurnAdapter, TurnAgent, attach
from ...livekit.port import Lever, LeverPort, Site
from .. import clock
from ..io import PacedAudioOutput, PlayoutSegment
from ..models import LLMRequest, ScriptedLLM, ScriptedReply, ScriptedToolCall, ScriptedTTS
from ..session import SimulatedCall, load_silero_vad
from ..speech import spoken_line
from .draw import (
    GENERATED_GREETING,
    GREETING_INSTRUCTIONS,
    HANDOVER_GREETING,
    HANDOVER_INSTRUCTIONS,
    PROBES,
    CallPlan,
    Cue,
    ReplyPlan,
    World,
    draw_call,
)

CLOSE_LIMIT = 30.0
"""Virtual seconds the session may take to close after the call limit (LiveKit's own
waits, e.g. for a last transcript) before the loop's time limit stops the run."""
CALL_LIMIT = 90.0
"""Virtual seconds a call may last at most: past this, the harness hangs up (and says so)."""
ANCHOR_WAIT = 4.0
"""Virtual seconds a cue waits for agent audio to talk over (or a re-asked probe for the
state to change) before it goes on anyway."""
ANSWER_WAIT = 15.0
"""Virtual seconds the probe's answer may take to start (tools may run before it)."""
PROBE_STATE_AGE = 2.0
"""The probe is asked this many seconds into the state the call is in."""
PROBE_SECONDS = 1.2
"""How long the caller takes to ask the probe."""
PROBE_GAP = 1.5
"""...and at least this long after the caller's previous line, so that it is a turn of its
own (LiveKit ends a turn after 0.55 s of silence and its endpointing delay)."""
HANDOFF_SETTLE = 2.0
"""Seconds after a handoff during which LiveKit may still drop the caller's speech."""
HANG_UP_AFTER = 0.1
"""Seconds after the probe's answer (or after the last line) before the caller hangs up."""
POLL = 0.05
"""How often the harness looks at the call, in virtual seconds (an audio frame)."""
FRAME_DURATION = 0.05
"""The callee's audio frames: RoomIO's default size (half the frames of 20 ms ones)."""


class SimulatedLeverFailure(RuntimeError):
    """A lever made to raise by the plan's fault (stands for a LiveKit call that raised)."""


@dataclass(frozen=True)
class Render:
    """One text the TTS rendered for a speech, and how long its audio is."""

    text: str
    seconds: float


@dataclass
class SpeechRecord:
    """What the harness saw of one agent speech."""

    speech_id: str
    created_at: float
    source: str
    steps: list[list[Render]] = field(default_factory=list)
    """Each generation step's renders, in order (a step is one ``tts_node`` run)."""
    segments: list[PlayoutSegment] = field(default_factory=list)
    """Its playout segments, in order (one per step that pushed audio)."""
    allow_interruptions: bool = True
    """Whether LiveKit let the caller interrupt it, as it ended."""
    interrupted: bool = False
    broken: bool = False
    """Cut by the service (realtime: its response failed, or its socket dropped): a
    greeting broken so is retried, and judged by its retry."""

    def step_text(self, step: int) -> str:
        """The text of step ``step`` as rendered (its words, single-spaced)."""
        return " ".join(" ".join(render.text.split()) for render in self.steps[step]).strip()


@dataclass
class Spoken:
    """One caller line as played: its cue, and when (call time)."""

    cue: Cue
    name: str
    started_at: float | None = None
    ended_at: float | None = None
    delivered_seconds: float = 0.0
    unheard_by_design: bool = False
    """Said where the policy or LiveKit does not hear the caller on purpose."""


@dataclass
class CallRecord:
    """Everything the judges look at, on the call clock (seconds since the callee's audio
    input started)."""

    plan: CallPlan
    trace: Trace | None = None
    trace_offset: float = 0.0
    """Call time minus the trace's time."""
    violations: list[str] = field(default_factory=list)
    """Invariant breaches (I1–I10) the strict controller raised."""
    breaches: list[str] = field(default_factory=list)
    """Outcome breaches (O1–O7) of the adapter's monitor."""
    warnings: list[str] = field(default_factory=list)
    """turnfsm's own warnings and errors (a lever or handler that failed)."""
    speeches: dict[str, SpeechRecord] = field(default_factory=dict)
    segments: list[tuple[PlayoutSegment, str | None]] = field(default_factory=list)
    """Every playout segment with its speech, times as loop times (see ``loop_offset``)."""
    loop_offset: float = 0.0
    """Call time minus loop time."""
    lines: list[Spoken] = field(default_factory=list)
    probes: list[Spoken] = field(default_factory=list)
    probe_states: list[str] = field(default_factory=list)
    """The machine's state when each probe was asked."""
    user_turns: list[tuple[float, str]] = field(default_factory=list)
    """User messages as LiveKit added them to the history."""
    assistant_messages: list[tuple[str, str | None]] = field(default_factory=list)
    """``(item id, speech id)`` of assistant messages as LiveKit added them."""
    added_at: dict[str, float] = field(default_factory=dict)
    """When LiveKit added each message to the history."""
    handoffs: list[float] = field(default_factory=list)
    """When a tool round with a ``transfer`` ended (LiveKit hands the call over then)."""
    transfers: list[float] = field(default_factory=list)
    """When each ``transfer`` tool started."""
    tool_calls: dict[str, float] = field(default_factory=dict)
    """When each tool call began."""
    tool_rounds: list[tuple[float, float]] = field(default_factory=list)
    """``(first call began, function_tools_executed)`` of each tool round."""
    history: list[tuple[str, str, str]] = field(default_factory=list)
    """``(item id, role, text)`` of the history's messages as the call ended."""
    agent_context: list[tuple[str, str, str]] | None = None
    """The same of the agent's ``chat_ctx`` (None when it could not be read)."""
    input_muted: bool = False
    turns_held: bool = False
    turn_detection_restored: bool = True
    fault_fired: int = 0
    closed_at: float | None = None
    hung_up_at: float | None = None
    """When the caller hung up (call time), if it did."""
    closed_by: str = ""
    """Who ended the call: ``"turnfsm"`` (an ``EndCall``), ``"caller"``, ``"limit"``."""
    state_at_end: str = ""
    """The call's state as it ended (turnfsm's; LiveKit's agent state on a baseline)."""
    lost_audio: list[tuple[float, float]] = field(default_factory=list)
    """Where the service lost the caller's audio (realtime: a dropped socket loses what its
    connection had not committed, and what is said until the next one is up)."""
    harness_error: str | None = None
    tts_rate: float = 15.0
    words_heard: Callable[[str, float], list[str]] | None = None
    """The words of a text whose audio played to their end after so many seconds played,
    where the speech's own timeline says (realtime: the server's); None: at ``tts_rate``."""
    turnfsm: bool = True
    """Whether turnfsm was attached (False: a LiveKit-only baseline of the same call)."""

    def call_time(self, loop_time: float) -> float:
        """A loop time on the call clock."""
        return loop_time + self.loop_offset

    def unheard_until(self, line: Spoken) -> float | None:
        """When the window ends in which the caller is not heard by design, if ``line``
        overlapped one (call time; ``math.inf`` while the call is still in it); None when
        it was heard."""
        start, end = line.started_at, line.ended_at
        if start is None or end is None:
            return None
        overlapping = [
            window_end
            for window_start, window_end in self.deaf_windows()
            if window_start < end and start < window_end
        ]
        return max(overlapping, default=None)

    def handoff_windows(self) -> list[tuple[float, float]]:
        """Around a handoff, from a ``transfer`` tool's start (or from the start of what the
        caller said that no turn had committed yet) to the end of what the outgoing agent
        still says (at least :data:`HANDOFF_SETTLE` after the handoff; open while the tool
        runs): LiveKit commits no turn of speech in flight at a handoff (seen on plain
        LiveKit sessions, without turnfsm)."""
        record, windows = self, []
        for began in record.transfers:
            handed_at = min((h for h in record.handoffs if h >= began), default=math.inf)
            committed = " ".join(text for at, text in record.user_turns if at <= handed_at)
            in_flight = [
                line.started_at
                for line in record.lines + record.probes
                if line.started_at is not None
                and line.started_at < handed_at
                and line.cue.text not in committed
            ]
            ends = [
                math.inf if segment.finished_at is None else record.call_time(segment.finished_at)
                for segment, speech_id in record.segments
                if record.call_time(segment.captured_at) < handed_at + HANDOFF_SETTLE
                or self.spoken_before(speech_id, handed_at)  # the outgoing agent's
            ]
            ends = [end for end in ends if end > handed_at]
            start = min([began, *in_flight])
            windows.append((start, max([handed_at + HANDOFF_SETTLE, *ends])))
        return windows

    def spoken_before(self, speech_id: str | None, at: float) -> bool:
        """Whether ``speech_id`` is a speech created by ``at`` (call time): after a
        handoff, one of the outgoing agent's."""
        speech = self.speeches.get(speech_id or "")
        return speech is not None and 0 <= speech.created_at <= at

    def deaf_windows(self) -> list[tuple[float, float]]:
        """Where the policy or LiveKit does not hear the caller on purpose, or the service
        lost what the caller said (call times)."""
        policy, record = self.plan.policy, self
        windows: list[tuple[float, float]] = []
        warmup = self.plan.session_options.get("aec_warmup_duration")
        started = [record.call_time(s.started_at) for s, _ in record.segments if s.started_at]
        if warmup and started:
            windows.append((min(started), min(started) + warmup))
        windows.extend(self.handoff_windows())
        windows.extend(self.lost_audio)
        if self.trace is None:
            return windows
        changes = [
            (step.at + record.trace_offset, step.after)
            for step in self.trace.steps
            if step.before != step.after
        ]
        deaf_states = {"ringing", "awaiting_user"} if policy.has_greeting else set()
        fault = self.plan.fault
        lock_failed = bool(self.fault_fired) and (
            fault is not None and fault.effect in ("hold_user_turns", "mute_input", "unmute_input")
        )
        if policy.greeting_overlap == "drop" or lock_failed:
            deaf_states.add("greeting")  # dropped by policy, or neither held nor muted (its
            # lever failed): LiveKit drops speech over a locked speech then; or its held
            # audio is discarded (a failed unmute releases the input without replay)
        if policy.mute_input_during_tools:
            deaf_states.add("tool_loop")
        spills = policy.mutes_greeting and policy.greeting_overlap == "drop"
        for index, (at, state) in enumerate(changes):
            left = changes[index + 1][0] if index + 1 < len(changes) else math.inf
            if state in deaf_states:
                windows.append((at, left))
            if state == "greeting" and spills:
                windows.append((left, left + policy.spill_over_window))  # a spill-over
        return windows

    def ended_at(self) -> float | None:
        """When the call's end began: the caller's hang-up, or turnfsm's step into ``ended``
        (the session closes a little later)."""
        if self.hung_up_at is not None:
            return self.hung_up_at
        steps = self.trace.steps if self.trace is not None else []
        ends = [step.at + self.trace_offset for step in steps if step.after == "ended"]
        return ends[0] if ends else self.closed_at

    def _end_calls(self) -> list[tuple[Event, fx.EndCall]]:
        """Every ``EndCall`` turnfsm emitted, with the event of its step."""
        steps = self.trace.steps if self.trace is not None else []
        return [(s.event, e) for s in steps for e in s.effects if isinstance(e, fx.EndCall)]

    def end_reasons(self) -> list[str]:
        """The reasons of every ``EndCall`` turnfsm emitted."""
        return [end.reason for _, end in self._end_calls()]

    def ends_of_its_own(self) -> list[str]:
        """The reasons of the ``EndCall`` turnfsm emitted on its own decision (a timer, an
        answering machine, a greeting that failed twice, a session error): on any event
        but a ``CallEnded``, whose reason is the caller's hang-up or LiveKit's close."""
        return [end.reason for event, end in self._end_calls() if not isinstance(event, CallEnded)]


class _RecordingController(TurnController):
    """A strict controller that also keeps the invariant breaches it raised (the adapter
    logs and survives them; the judges must see them)."""

    violations: list[str]

    def handle(self, event: Event) -> tuple[fx.Effect, ...]:
        try:
            return super().handle(event)
        except InvariantViolation as violation:
            self.violations.append(str(violation))
            raise


class _TurnfsmLog(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def speech_now() -> str | None:
    handle = _SpeechHandleContextVar.get(None)
    return handle.id if handle is not None else None


class Recorder:
    """Collects steps and renders per speech (see the module's docstring)."""

    def __init__(self, record: CallRecord) -> None:
        self.record = record

    def speech(self, speech_id: str) -> SpeechRecord:
        speeches = self.record.speeches
        if speech_id not in speeches:
            speeches[speech_id] = SpeechRecord(speech_id, created_at=-1.0, source="?")
        return speeches[speech_id]

    def step_started(self) -> None:
        speech_id = speech_now()
        if speech_id is not None:
            self.speech(speech_id).steps.append([])

    def rendered(self, text: str, seconds: float) -> None:
        speech_id = speech_now()
        if speech_id is None:
            return
        speech = self.speech(speech_id)
        if not speech.steps:
            speech.steps.append([])
        speech.steps[-1].append(Render(text, seconds))


class _FuzzTTS(ScriptedTTS):
    def __init__(self, recorder: Recorder, **options: Any) -> None:
        super().__init__(**options)
        self._recorder = recorder

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        samples = round(self.duration_of(text) * self.sample_rate)
        self._recorder.rendered(text, samples / self.sample_rate)
        return super().synthesize(text, conn_options=conn_options)


class _FuzzOutput(PacedAudioOutput):
    def __init__(self, record: CallRecord) -> None:
        super().__init__()
        self._record = record
        self.session: AgentSession | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        count = len(self.segments)
        await super().capture_frame(frame)
        if len(self.segments) > count:
            segment = self.segments[-1]
            speech = self.session.current_speech if self.session is not None else None
            speech_id = speech.id if speech is not None else None
            self._record.segments.append((segment, speech_id))
            if speech_id is not None:
                self._record.speeches.setdefault(
                    speech_id, SpeechRecord(speech_id, created_at=-1.0, source="?")
                ).segments.append(segment)


class FuzzAgent(TurnAgent):
    """The fuzzed calls' agent: three tools (slow, raising, handing over) and a note of
    every generation step for the judges."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        chat_ctx: llm.ChatContext | None = None,
        handed_over: bool = False,
    ) -> None:
        super().__init__(instructions="You are Ada, on a call.", chat_ctx=chat_ctx)
        self._recorder = recorder
        self._handed_over = handed_over

    async def on_enter(self) -> None:
        if self._handed_over:  # a colleague taking the call over introduces itself
            self.session.generate_reply(instructions=HANDOVER_INSTRUCTIONS)

    def tts_node(self, text: Any, model_settings: ModelSettings) -> Any:
        self._recorder.step_started()
        return Agent.default.tts_node(self, text, model_settings)

    def _called(self, context: RunContext) -> float:
        """Note a tool call's start (call time), by its call id, and return it."""
        record = self._recorder.record
        at = record.call_time(asyncio.get_running_loop().time())
        record.tool_calls[context.function_call.call_id] = at
        return at

    @function_tool
    async def lookup(self, context: RunContext, seconds: float) -> str:
        """Look something up (takes ``seconds``)."""
        self._called(context)
        await asyncio.sleep(seconds)
        return "Found it."

    @function_tool
    async def broken_lookup(self, context: RunContext, seconds: float) -> str:
        """Look something up in a service that fails after ``seconds``."""
        self._called(context)
        await asyncio.sleep(seconds)
        raise RuntimeError("the lookup service is down")

    @function_tool
    async def transfer(self, context: RunContext, seconds: float) -> tuple[Agent, str]:
        """Hand the call to a colleague (after ``seconds``)."""
        record = self._recorder.record
        record.transfers.append(self._called(context))
        await asyncio.sleep(seconds)
        colleague = FuzzAgent(self._recorder, chat_ctx=self.chat_ctx.copy(), handed_over=True)
        return colleague, "Transferring you."


class PlannedReplies:
    """The scripted model's answers: each new user turn takes the next :class:`ReplyPlan`
    (the pipeline's LLM and the realtime world's model alike)."""

    def __init__(self, plan: CallPlan) -> None:
        self._plans = iter(plan.replies)
        self._by_turn: dict[str, ReplyPlan] = {}

    def __call__(self, request: LLMRequest) -> ScriptedReply:
        items = request.chat_ctx.items
        user_at = max((i for i, item in enumerate(items) if _is_message(item, "user")), default=-1)
        instructions = " ".join(
            item.text_content or ""
            for item in items[user_at + 1 :]
            if isinstance(item, llm.ChatMessage) and item.role in ("system", "developer")
        )
        rounds = sum(item.type == "function_call_output" for item in items[user_at + 1 :])
        return self.answer(
            instructions,
            turn=request.last_user_text or "",
            rounds=rounds,
            tools_forbidden=request.tool_choice == "none",
        )

    def answer(
        self, instructions: str, *, turn: str, rounds: int, tools_forbidden: bool
    ) -> ScriptedReply:
        """The answer to the user turn ``turn`` after ``rounds`` tool rounds, asked with
        ``instructions`` (the greeting's, a handover's) and ``tool_choice="none"`` or not."""
        if GREETING_INSTRUCTIONS in instructions:
            return ScriptedReply(text=GENERATED_GREETING)
        if HANDOVER_INSTRUCTIONS in instructions:
            return ScriptedReply(text=HANDOVER_GREETING)
        asked = [probe for probe in PROBES if probe in turn]
        if asked:  # the latest probe in the turn (two may share one: the first held back)
            return ScriptedReply(text=PROBES[max(asked, key=turn.rindex)])
        plan = self._by_turn.get(turn)
        if plan is None:
            plan = self._by_turn[turn] = next(self._plans, ReplyPlan("Okay."))
        tools_allowed = not tools_forbidden or plan.ignores_tool_choice
        if rounds < len(plan.tool_rounds) and tools_allowed:
            return ScriptedReply(
                tool_calls=tuple(
                    ScriptedToolCall(call.name, {"seconds": call.seconds})
                    for call in plan.tool_rounds[rounds]
                )
            )
        return ScriptedReply(text=plan.text)


def _is_message(item: Any, *roles: str) -> bool:
    return item.type == "message" and item.role in roles


def _messages(items: Any) -> list[tuple[str, str, str]]:
    return [
        (item.id, item.role, item.text_content or "")
        for item in items
        if item.type == "message" and item.role in ("user", "assistant")
    ]


@dataclass(frozen=True)
class Mutation:
    """A change to turnfsm for one run: how a test seeds a bug for the fuzzer to find.

    Attributes:
        levers: Levers to use instead of turnfsm's, by effect type.
        rules_class: The machine's rules instead of :class:`~turnfsm.rules.TurnRules`.
    """

    levers: Mapping[type[fx.Effect], Lever] = field(default_factory=dict)
    rules_class: type[TurnRules] = TurnRules


def run_call(
    seed: int,
    *,
    world: World = "pipeline",
    mutation: Mutation | None = None,
    turnfsm: bool = True,
) -> CallRecord:
    """Draw the call ``seed`` stands for and run it on its own virtual loop.

    Args:
        seed: The call's seed.
        world: Which kind of call to draw.
        mutation: A change to turnfsm (a test seeds a bug this way).
        turnfsm: Attach turnfsm; without it the same call runs on LiveKit alone (the
            baseline that tells turnfsm's findings from LiveKit's and the harness's).
    """
    plan = draw_call(seed, world)
    record = CallRecord(plan=plan, tts_rate=plan.pace.tts_chars_per_second, turnfsm=turnfsm)
    log = logging.getLogger("turnfsm")
    handler = _TurnfsmLog(record.warnings)
    log.addHandler(handler)
    level = log.level
    log.setLevel(min(log.getEffectiveLevel(), logging.WARNING))  # heard, however configured
    try:
        harness_class: type[CallHarness] = CallHarness
        if plan.world == "realtime":  # imported here: it builds on this module
            from .realtime_call import RealtimeHarness

            harness_class = RealtimeHarness
        harness = harness_class(plan, record, mutation or Mutation(), turnfsm=turnfsm)
        clock.run(harness.run(), seed=seed, time_limit=CALL_LIMIT + CLOSE_LIMIT)
    except Exception:  # the harness or the session failed: that is a finding too
        record.harness_error = traceback.format_exc(limit=8)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return record


class CallHarness:
    """One call: the session, turnfsm attached (unless a baseline), the caller's task."""

    def __init__(
        self,
        plan: CallPlan,
        record: CallRecord,
        mutation: Mutation,
        *,
        turnfsm: bool,
    ) -> None:
        self.plan = plan
        self.record = record
        self.closed = asyncio.Event()
        self.controller: TurnController | None = None
        self.adapter: TurnAdapter | None = None
        if turnfsm:
            controller = _RecordingController(
                plan.policy, strict=True, keep_text=True, rules_class=mutation.rules_class
            )
            controller.violations = record.violations
            self.controller = controller
        self.output = _FuzzOutput(record)
        self.call = self._build_call(mutation)
        self.call.audio_output = self.output

    def _build_call(self, mutation: Mutation) -> SimulatedCall:
        """The simulated call the plan describes, on the pipeline's scripted models."""
        plan, recorder = self.plan, Recorder(self.record)
        return SimulatedCall(
            agent=FuzzAgent(recorder),
            llm=ScriptedLLM(
                PlannedReplies(plan),
                ignore_tool_choice=True,
                chars_per_second=plan.pace.llm_chars_per_second,
                time_to_first_token=plan.pace.llm_time_to_first_token,
            ),
            tts=_FuzzTTS(
                recorder,
                chars_per_second=plan.pace.tts_chars_per_second,
                synthesis_delay=plan.pace.tts_synthesis_delay,
            ),
            final_lag=plan.pace.stt_final_lag,
            frame_duration=FRAME_DURATION,
            vad=load_silero_vad(),
            turn_handling=plan.turn_handling,  # type: ignore[arg-type]
            transcript_sync=plan.transcript_sync,
            session_options=plan.session_options,
            before_start=functools.partial(self._before_start, mutation),
        )

    def _before_start(self, mutation: Mutation, session: AgentSession) -> None:
        record, call = self.record, self.call
        if self.controller is not None:
            self.adapter = attach(session, self.controller, strict=False)
            self.adapter.levers.update(mutation.levers)
            if self.plan.fault is not None:
                _make_lever_fail(self.adapter, self.plan, record)
        self.output.session = session
        session.on("conversation_item_added", lambda event: _item_added(record, session, event))
        session.on("speech_created", lambda event: _speech_created(record, call, event))
        session.on("function_tools_executed", lambda event: _tools_executed(record, call, event))
        session.on("close", lambda _: self.closed.set())

    async def run(self) -> None:
        record, call = self.record, self.call
        async with call:
            loop = asyncio.get_running_loop()
            record.loop_offset = call.now() - loop.time()
            if self.adapter is not None and self.controller is not None:
                record.trace_offset = call.now() - self.adapter.now()
                record.trace = self.controller.trace
            caller = asyncio.ensure_future(self._caller())
            limit = asyncio.ensure_future(asyncio.sleep(CALL_LIMIT))
            ended = asyncio.ensure_future(self.closed.wait())
            await asyncio.wait({caller, limit, ended}, return_when=asyncio.FIRST_COMPLETED)
            if record.closed_by == "caller" and not limit.done():
                await asyncio.wait({caller, limit}, return_when=asyncio.FIRST_COMPLETED)
            for task in (caller, limit, ended):
                task.cancel()
            if caller.done() and not caller.cancelled() and caller.exception() is not None:
                raise caller.exception()  # type: ignore[misc]
            if not record.closed_by:
                record.closed_by = "turnfsm" if self.closed.is_set() else "limit"
                self._snapshot()
            record.closed_at = call.now()
            if self.adapter is not None:
                record.breaches.extend(str(breach) for breach in self.adapter.outcomes.breaches)

    # -- what the caller can tell of the call's state ---------------------------------

    def state(self) -> str:
        """turnfsm's state, or LiveKit's agent state on a baseline call."""
        if self.controller is not None:
            return self.controller.state
        return str(self.call.session.agent_state)

    def state_entered(self) -> float:
        """When the call entered :meth:`state` (call time)."""
        if self.controller is not None and self.controller.trace is not None:
            changes = [s for s in self.controller.trace.steps if s.before != s.after]
            return changes[-1].at + self.record.trace_offset if changes else 0.0
        events = self.call.events_named("agent_state_changed")
        return events[-1].at if events else 0.0

    # -- the caller -----------------------------------------------------------------------

    async def _caller(self) -> None:
        """The callee: picks up, says each cue, asks the probe, hangs up."""
        plan, record, call = self.plan, self.record, self.call
        if plan.policy.direction == "outbound" and self.adapter is not None:
            await call.sleep_until(plan.answer_at)
            self.adapter.dispatch(CallAnswered(at=self.adapter.now()))
        for index, cue in enumerate(plan.cues):
            if self.closed.is_set():
                return
            await self._wait_for_anchor(cue)
            if cue.kind == "hang_up":
                await self._hang_up()
                return
            record.lines.append(await self._say(cue, f"{index}-{cue.kind}"))
        if plan.probe_delay is None or self.closed.is_set():
            await self._hang_up()
            return
        await asyncio.sleep(plan.probe_delay)
        for attempt, text in enumerate(PROBES):
            said = [line.ended_at for line in record.lines + record.probes if line.ended_at]
            await call.sleep_until(
                max(self.state_entered() + PROBE_STATE_AGE, max(said, default=0.0) + PROBE_GAP)
            )
            if self.closed.is_set():
                return
            record.probe_states.append(self.state())
            cue = Cue("question", text, duration=PROBE_SECONDS, anchor="line_end", offset=0.0)
            probe = await self._say(cue, f"probe-{attempt}")
            record.probes.append(probe)
            if self.record.unheard_until(probe) is None:
                if await self._answered(after=probe) or self.record.unheard_until(probe) is None:
                    break  # answered, or not, where it was to be (a handoff may come later)
            # not heard by design (a dropped overlap, tools muting the caller, LiveKit's AEC
            # warm-up, first words answered by the greeting): asked again once that is over,
            # 2 s into the state the call is in then
            probe.unheard_by_design = True
            await self._until_heard(probe)
        await asyncio.sleep(HANG_UP_AFTER)
        await self._hang_up()

    async def _until_heard(self, probe: Spoken) -> None:
        """Wait until the window that ``probe`` fell in is over (one still open: until it
        closes, at most :data:`ANCHOR_WAIT`)."""
        call = self.call
        with contextlib.suppress(TimeoutError):
            await call.wait_until(
                lambda: self.record.unheard_until(probe) != math.inf,
                timeout=ANCHOR_WAIT,
                poll_interval=POLL,
            )
        await call.sleep_until(
            min(self.record.unheard_until(probe) or 0.0, call.now() + ANCHOR_WAIT)
        )

    async def _answered(self, *, after: Spoken) -> bool:
        """Wait until the probe's answer played to its end (or the call ends); whether it did."""
        record = self.record

        def answer_played() -> bool:
            return any(
                segment.finished
                and segment.started_at is not None
                and record.call_time(segment.started_at) >= (after.started_at or 0.0)
                and _says(record.speeches.get(speech_id or ""), PROBES[after.cue.text])
                for segment, speech_id in record.segments
            )

        asked = self.call.now()

        def waited_enough() -> bool:
            """:data:`ANSWER_WAIT` since it was asked, or since the greeting it was held
            over ended (``answer_whole``: it is answered after the greeting)."""
            return self.call.now() >= max(asked, self._greeting_left()) + ANSWER_WAIT

        await self.call.wait_until(
            lambda: answer_played() or self.closed.is_set() or waited_enough(),
            timeout=CALL_LIMIT,
            poll_interval=POLL,
        )
        return answer_played()

    def _greeting_left(self) -> float:
        """When the call last left the greeting (call time; 0 if it never did)."""
        if self.controller is None or self.controller.trace is None:
            return 0.0
        left = [
            step.at + self.record.trace_offset
            for step in self.controller.trace.steps
            if step.before == "greeting" and step.after != "greeting"
        ]
        return max(left, default=0.0)

    async def _wait_for_anchor(self, cue: Cue) -> None:
        call = self.call
        if cue.anchor == "call":
            await call.sleep_until(cue.offset)
            return
        if cue.anchor == "line_end":
            await asyncio.sleep(cue.offset)
            return
        await self._into_agent_audio(cue.offset)

    async def _into_agent_audio(self, offset: float) -> None:
        """Wait until ``offset`` seconds into the agent audio playing now, or the next to
        play (at most :data:`ANCHOR_WAIT` for it to start)."""
        call, output = self.call, self.output

        def playing() -> PlayoutSegment | None:
            segment = output.current_segment
            return segment if segment is not None and segment.started_at is not None else None

        with contextlib.suppress(TimeoutError):
            await call.wait_until(
                lambda: playing() is not None or self.closed.is_set(),
                timeout=ANCHOR_WAIT,
                poll_interval=POLL,
            )
        segment = playing()
        if segment is not None and segment.started_at is not None:
            delay = segment.started_at + offset - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _say(self, cue: Cue, name: str) -> Spoken:
        call = self.call
        line = spoken_line(cue.text, duration=cue.duration, name=name, seed=self.plan.seed)
        spoken = Spoken(cue=cue, name=name)
        call.audio_input.say_now(line)

        def utterance() -> Any:
            found = call.ledger.utterances_of(name)
            return found[0] if found else None

        with contextlib.suppress(TimeoutError):
            await call.wait_until(
                lambda: (
                    (u := utterance()) is not None
                    and u.ended_at is not None
                    or self.closed.is_set()
                ),
                timeout=cue.duration + 5.0,
                poll_interval=POLL,
            )
        found = utterance()
        if found is not None:
            origin = call.audio_input.started_at or 0.0
            spoken.started_at = found.started_at - origin
            spoken.ended_at = found.ended_at - origin if found.ended_at is not None else None
            spoken.delivered_seconds = found.delivered_seconds
        return spoken

    async def _hang_up(self) -> None:
        record = self.record
        if record.closed_by:
            return
        self._snapshot()
        if self.closed.is_set() or (self.controller is not None and self.controller.is_ended):
            record.closed_by = "turnfsm"  # it hung up first (the session may still close)
            return
        record.closed_by = "caller"
        record.hung_up_at = self.call.now()
        await self.call.session.aclose()

    def _snapshot(self) -> None:
        """The history, the agent's context and the input, as the call ends."""
        record, session, adapter = self.record, self.call.session, self.adapter
        record.history = _messages(session.history.items)
        with contextlib.suppress(RuntimeError):
            record.agent_context = _messages(session.current_agent.chat_ctx.items)
        record.state_at_end = self.state()
        if adapter is not None:
            record.input_muted = adapter.gate is not None and adapter.gate.muted
            record.turns_held = adapter.held_turn_settings is not None
        record.turn_detection_restored = (
            session.turn_detection == self.plan.turn_handling["turn_detection"]
        )


def _make_lever_fail(adapter: TurnAdapter, plan: CallPlan, record: CallRecord) -> None:
    assert plan.fault is not None
    effect_type = next(t for t in fx.EFFECT_TYPES if t.name == plan.fault.effect)
    lever = adapter.levers[effect_type]
    occurrence = plan.fault.occurrence
    uses = 0

    def failing(port: LeverPort, effect: fx.Effect, site: Site) -> None:
        nonlocal uses
        uses += 1
        if uses == occurrence:
            record.fault_fired += 1
            raise SimulatedLeverFailure(f"{effect.name} made to fail by the plan")
        lever(port, effect, site)

    adapter.levers[effect_type] = failing


def _item_added(record: CallRecord, session: AgentSession, event: Any) -> None:
    item = event.item
    at = record.call_time(asyncio.get_running_loop().time())
    if not isinstance(item, llm.ChatMessage):
        return
    record.added_at.setdefault(item.id, at)
    if item.role == "user":
        record.user_turns.append((at, item.text_content or ""))
    elif item.role == "assistant":
        speech = session.current_speech
        record.assistant_messages.append((item.id, speech.id if speech is not None else None))


def _tools_executed(record: CallRecord, call: SimulatedCall, event: Any) -> None:
    # its calls' first start (rounds may overlap: a realtime model answers a turn said
    # during a tool round with a round of its own)
    started = [
        record.tool_calls.get(function_call.call_id) for function_call in event.function_calls
    ]
    began = min((at for at in started if at is not None), default=call.now())
    record.tool_rounds.append((began, call.now()))
    if any(function_call.name == "transfer" for function_call in event.function_calls):
        record.handoffs.append(call.now())  # LiveKit hands over once the round is done


def _speech_created(record: CallRecord, call: SimulatedCall, event: Any) -> None:
    handle = event.speech_handle
    speech = record.speeches.setdefault(
        handle.id, SpeechRecord(handle.id, created_at=-1.0, source=event.source)
    )
    speech.created_at, speech.source = call.now(), event.source

    def done(finished: Any) -> None:
        speech.allow_interruptions = finished.allow_interruptions
        speech.interrupted = finished.interrupted

    handle.add_done_callback(done)


def _says(speech: SpeechRecord | None, text: str) -> bool:
    return speech is not None and any(
        speech.step_text(step) == text for step in range(len(speech.steps))
    )
