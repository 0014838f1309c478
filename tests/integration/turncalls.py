"""Harness for the integration tests: a simulated call driven by a turnfsm controller.

:func:`turn_call` runs a real ``AgentSession`` (silero VAD, scripted models, paced audio)
through :class:`~turnfsm.adapters.sim.SimulatedCall` with a strict controller attached,
and yields a :class:`TurnCall` that maps the controller's trace onto the call's clock
(seconds since the callee's audio input started), so every assertion uses one clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    Agent,
    AgentSession,
    APIConnectionError,
    APIConnectOptions,
    function_tool,
    tts,
)

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, attach
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    PlayoutSegment,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    ScriptedTTS,
    SimulatedCall,
    UserLine,
)
from turnfsm.adapters.sim.testing import describe_call
from turnfsm.events import CallAnswered
from turnfsm.trace import TraceStep

SETTINGS: dict[str, dict[str, Any]] = {
    "livekit-defaults": {"livekit_defaults": True, "transcript_sync": True},
    "sim": {},
}
"""The LiveKit settings every real-session test runs under, LiveKit's own first: its 1.8.9
default turn handling (preemptive generation, interruption and false-interruption
settings at their defaults; VAD endpointing stands in for the cloud turn detector) with a
transcript synchronizer in the output chain, as RoomIO has; and the simulation's (no
preemptive generation, VAD interruption mode, no synchronizer). A test's own options
(e.g. its output chain) win over the row's."""

SETTING_ROWS = list(SETTINGS)
"""``pytest.mark.parametrize("settings", SETTING_ROWS)``: LiveKit's defaults first."""

GREETING = "Hi, this is Ada calling from Acme Dental about your appointment tomorrow."
"""A greeting of about 4.9 s with the default scripted TTS (15 characters per second)."""


@dataclass
class TurnCall:
    """One simulated call with its controller and adapter; times are call times."""

    call: SimulatedCall
    controller: TurnController
    adapter: TurnAdapter
    offset: float
    """Call time minus adapter time (both clocks run on the same event loop)."""

    @property
    def session(self) -> AgentSession:
        return self.call.session

    @property
    def steps(self) -> list[TraceStep]:
        assert self.controller.trace is not None
        return self.controller.trace.steps

    def at(self, step: TraceStep) -> float:
        """The call time of a trace step."""
        return step.at + self.offset

    def events(self, name: str) -> list[TraceStep]:
        """The steps whose event is ``name`` (e.g. ``"user_speech_ended"``)."""
        return [step for step in self.steps if step.event.name == name]

    def effects(self, kind: type[fx.Effect]) -> list[fx.Effect]:
        """Every effect of ``kind`` emitted so far, in order."""
        return [e for step in self.steps for e in step.effects if isinstance(e, kind)]

    def call_time(self, loop_time: float) -> float:
        """A loop time (the sim's segment and ledger stamps) on the call clock."""
        started = self.call.audio_input.started_at
        assert started is not None
        return loop_time - started

    def segment_start(self, segment: PlayoutSegment) -> float:
        assert segment.started_at is not None
        return self.call_time(segment.started_at)

    def texts(self, role: str) -> list[str]:
        return [m.text_content or "" for m in self.call.messages(role)]  # type: ignore[arg-type]

    def describe(self) -> str:
        """The caller's lines, the trace, history and playout, for assertion messages."""
        return describe_call(self.call, self.steps, self.offset)

    def now(self) -> float:
        return self.call.now()

    async def segment_played(self, index: int, *, timeout: float) -> PlayoutSegment:
        """Wait until playout segment ``index`` finished playing; on a timeout, fail with
        the call's trace and history."""
        try:
            return await wait_segment(self.call, index, timeout=timeout, finished=True)
        except TimeoutError:
            raise AssertionError(self.describe()) from None


@contextlib.asynccontextmanager
async def turn_call(
    policy: TurnPolicy,
    script: Any = (),
    *,
    agent: Agent | None = None,
    answer: bool = True,
    before_start: Any = None,
    settings: str = "sim",
    adapter_strict: bool | None = None,
    **sim_options: Any,
) -> AsyncIterator[TurnCall]:
    """Start a simulated call with a strict controller attached (and, for outbound
    policies, answered at once unless ``answer`` is False), under the LiveKit
    ``settings`` row (:data:`SETTINGS`). ``adapter_strict=False`` has the adapter warn
    about what it finds instead of raising it (``attach(strict=...)``)."""
    sim_options = {**SETTINGS[settings], **sim_options}
    controller = TurnController(policy, strict=True, keep_text=True)
    holder: dict[str, TurnAdapter] = {}

    def attach_controller(session: AgentSession) -> None:
        if before_start is not None:
            before_start(session)
        holder["adapter"] = attach(session, controller, strict=adapter_strict)

    call = SimulatedCall(
        script,
        agent=agent if agent is not None else TurnAgent(instructions="You are on a call."),
        before_start=attach_controller,
        **sim_options,
    )
    async with call:
        adapter = holder["adapter"]
        offset = call.now() - adapter.now()  # same loop, same instant: exact
        if answer and policy.direction == "outbound":
            adapter.dispatch(CallAnswered(at=adapter.now()))
        yield TurnCall(call=call, controller=controller, adapter=adapter, offset=offset)


async def settle(seconds: float = 0.3) -> None:
    """Let callbacks and short-lived tasks of a closed session finish."""
    await asyncio.sleep(seconds)


@contextlib.contextmanager
def recorded_tasks() -> Iterator[list[asyncio.Task[Any]]]:
    """Every task created on the running loop meanwhile, held (a task nothing else holds
    would be garbage-collected while still pending, and go unseen)."""
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()
    created: list[asyncio.Task[Any]] = []

    def record(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> Any:
        if previous is not None:
            task = previous(loop, coro, **options)
        else:
            task = asyncio.Task(coro, loop=loop, **options)
        created.append(task)
        return task

    loop.set_task_factory(record)
    try:
        yield created
    finally:
        loop.set_task_factory(previous)


def still_pending(tasks: list[asyncio.Task[Any]]) -> list[str]:
    """The coroutines of the tasks not done yet: what a closed call left behind."""
    return sorted(task.get_coro().__qualname__ for task in tasks if not task.done())  # type: ignore[union-attr]


async def run_scenarios(scenarios: dict[str, Awaitable[None]]) -> None:
    """Run independent scenarios (each its own call) concurrently, then fail naming every
    scenario that failed, with its message."""
    results = await asyncio.gather(*scenarios.values(), return_exceptions=True)
    failed = [
        (name, result)
        for name, result in zip(scenarios, results, strict=True)
        if isinstance(result, BaseException)
    ]
    if failed:
        report = "\n\n".join(f"[{name}] {type(e).__name__}: {e}" for name, e in failed)
        raise AssertionError(f"{len(failed)}/{len(scenarios)} scenarios failed:\n\n{report}")


def line_end(call: SimulatedCall, name: str, index: int = 0) -> float:
    """Call time at which the ``index``-th playback of line ``name`` ended."""
    utterance = call.ledger.utterances_of(name)[index]
    assert utterance.ended_at is not None, f"{name} is still playing"
    started = call.audio_input.started_at
    assert started is not None
    return utterance.ended_at - started


def line_start(call: SimulatedCall, name: str, index: int = 0) -> float:
    """Call time at which the ``index``-th playback of line ``name`` started."""
    started = call.audio_input.started_at
    assert started is not None
    return call.ledger.utterances_of(name)[index].started_at - started


async def wait_line_done(call: SimulatedCall, name: str, *, timeout: float) -> float:
    """Wait until the first playback of ``name`` has ended; return its end (call time)."""
    await call.wait_until(
        lambda: any(u.ended_at is not None for u in call.ledger.utterances_of(name)),
        timeout=timeout,
    )
    return line_end(call, name)


async def wait_segment(
    call: SimulatedCall, index: int, *, timeout: float, finished: bool = False
) -> PlayoutSegment:
    """Wait until playout segment ``index`` started playing (or finished)."""

    def ready() -> bool:
        segments = call.audio_output.segments
        if len(segments) <= index:
            return False
        segment = segments[index]
        return segment.finished if finished else segment.started_at is not None

    await call.wait_until(ready, timeout=timeout)
    return call.audio_output.segments[index]


class FailingOnceTTS(ScriptedTTS):
    """Its first synthesis of ``text`` (of any text if None) fails (a provider error);
    the others work."""

    def __init__(self, text: str | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.failing_text = text
        self.failed = False

    def synthesize(self, text: str, **options: Any) -> Any:
        if not self.failed and self.failing_text in (None, text):
            self.failed = True
            raise ConnectionError("the TTS provider is unreachable")
        return super().synthesize(text, **options)


class ProviderFailingTTS(ScriptedTTS):
    """Its first synthesis of ``text`` fails as a provider's request does: the stream
    opens and every attempt of it fails (``APIConnectionError``), which LiveKit retries
    per the request's ``conn_options`` and reports on the TTS; the others work."""

    def __init__(self, text: str, **options: Any) -> None:
        super().__init__(**options)
        self.failing_text = text
        self.failed = False

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        if self.failed or text != self.failing_text:
            return super().synthesize(text, conn_options=conn_options)
        self.failed = True
        self.texts.append(text)
        return _UnreachableStream(tts=self, input_text=text, conn_options=conn_options)


class _UnreachableStream(tts.ChunkedStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        raise APIConnectionError("the TTS provider is unreachable")


APPOINTMENT_QUESTION = LINES["question"].text
APPOINTMENT = "Your appointment is on Tuesday at ten."


class LookupAgent(TurnAgent):
    """Answers the question with one tool round whose tool takes ``tool_seconds``."""

    def __init__(self, tool_seconds: float = 0.0) -> None:
        super().__init__(instructions="Look things up.")
        self.tool_seconds = tool_seconds
        self.started: list[float] = []
        self.finished: list[float] = []

    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        loop = asyncio.get_running_loop()
        self.started.append(loop.time())
        await asyncio.sleep(self.tool_seconds)
        self.finished.append(loop.time())
        return "Tuesday at ten."


def lookup_reply(request: LLMRequest) -> ScriptedReply:
    """:class:`LookupAgent`'s model: the tool for the question, its result after it."""
    if request.chat_ctx.items[-1].type == "function_call_output":  # the tool's reply
        return ScriptedReply(text=APPOINTMENT)
    if request.last_user_text == APPOINTMENT_QUESTION:
        return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
    return ScriptedReply(text="Okay.")


async def barge_into_tool_step(
    interruption: dict[str, Any],
    line: str,
    *,
    after: float,
    tool_seconds: float,
    **policy_fields: Any,
) -> tuple[TurnCall, LookupAgent, ScriptedLLM]:
    """Under LiveKit's defaults (``interruption``: the session's interruption options),
    ask the question, answered with one tool round; say ``line`` ``after`` seconds into
    the tool's run; wait until the call is quiet. ``policy_fields`` change the policy
    (e.g. ``tool_reply_hold``).

    Returns the finished call (its session is closed; its records stay), the agent and
    the model."""
    policy = TurnPolicy(
        direction="inbound",
        first_speaker="user",
        max_tool_steps=3,
        **policy_fields,
    )
    agent = LookupAgent(tool_seconds)
    llm = ScriptedLLM(lookup_reply)
    script = CallScript([UserLine(0.3, "question")])
    async with turn_call(
        policy,
        script,
        agent=agent,
        llm=llm,
        turn_handling={"interruption": interruption},
        settings="livekit-defaults",
    ) as tc:
        call = tc.call
        await call.wait_until(lambda: bool(agent.started), timeout=LINES["question"].duration + 4)
        await call.sleep_until(call.now() + after)
        call.audio_input.say_now(line)
        # the tool ends, then either its result plays or the reply to the barge-in does
        await call.wait_until(lambda: bool(agent.finished), timeout=tool_seconds + 2)
        await call.wait_until(
            lambda: (
                call.session.agent_state == "listening"
                and bool(call.audio_output.segments)
                and call.audio_output.segments[-1].finished
            ),
            timeout=12,
        )
        await call.sleep_until(call.now() + 1.5)  # nothing else comes
        return tc, agent, llm
