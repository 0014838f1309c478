"""Harness of the fault suite: real ``AgentSession`` calls with strict controllers.

* :func:`fault_call` runs one simulated call (silero VAD, scripted models, real-time audio)
  with a strict, text-keeping controller attached through :func:`attach`.
* :class:`InjectedSTT` is a streaming STT whose speech the test injects; with ``vad=None``
  and ``turn_detection="stt"`` it drives real user turns through a session at almost no
  cost (the 50-session test).
* :class:`LogCapture` keeps every ``turnfsm`` log record, from DEBUG up, for suites whose
  calls run concurrently inside a module fixture (where ``caplog`` cannot reach).
* :class:`TaskLedger` tells which asyncio tasks were created with turnfsm code on the
  stack (the adapter and the core, not the simulation), to prove none is left behind.
* :func:`run_all` runs independent scenarios concurrently on one loop, each result or
  error kept by name, so a module's parametrized tests can assert on their own outcome.

The suite is timed: ``make test`` must run all of ``tests/fault`` in 90 s on two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import Agent, AgentSession, stt
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions
from livekit.agents.utils import AudioBuffer

import turnfsm
from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, adapter_for, attach
from turnfsm.adapters.sim import SimulatedCall, clock
from turnfsm.events import CallAnswered
from turnfsm.trace import TraceStep

GREETING = "Hi, Ada here."
"""A short greeting: 0.9 s with the default scripted TTS (15 characters per second)."""

TURNFSM_ROOT = os.path.dirname(turnfsm.__file__) + os.sep
SIM_ROOT = os.path.join(TURNFSM_ROOT, "adapters", "sim") + os.sep


def outbound(**options: Any) -> TurnPolicy:
    """An outbound policy with the short greeting; ``options`` override fields."""
    return TurnPolicy(**{"direction": "outbound", "greeting": GREETING, **options})


def muting_states(policy: TurnPolicy) -> frozenset[str]:
    """The states in which ``policy`` may keep the caller's input muted (invariant I2)."""
    states = set()
    if policy.mutes_greeting:
        states.add("greeting")
    if policy.mute_input_during_tools:
        states.add("tool_loop")
    return frozenset(states)


# -- one call ------------------------------------------------------------------------------


@dataclass
class FaultCall:
    """One simulated call with its controller and adapter."""

    name: str
    call: SimulatedCall
    controller: TurnController
    adapter: TurnAdapter
    turn_detection: Any = None
    """The session's turn detection before anything changed it."""
    discard_audio: Any = None
    """``discard_audio_if_uninterruptible`` before anything changed it."""
    notes: list[str] = field(default_factory=list)

    @property
    def session(self) -> AgentSession:
        return self.call.session

    @property
    def steps(self) -> list[TraceStep]:
        assert self.controller.trace is not None
        return self.controller.trace.steps

    @property
    def state(self) -> str:
        return self.controller.state

    def effects(self, kind: type[fx.Effect]) -> list[fx.Effect]:
        return [e for step in self.steps for e in step.effects if isinstance(e, kind)]

    def history(self) -> list[tuple[str, str]]:
        return [(m.role, m.text_content or "") for m in self.call.messages()]

    def replied_after(self, user_text: str) -> bool:
        """The callee has said ``user_text`` and an assistant message follows its end.

        A recorded sentence with a pause in it may commit as two user turns ("Yes, that" and
        "works for me."), depending on where endpointing falls on a loaded machine: the
        user messages are read as one running transcript."""
        history = self.history()
        said = ""
        for index, (role, text) in enumerate(history):
            if role == "user":
                said = f"{said} {text}".strip()
                if user_text in said:
                    return any(r == "assistant" for r, _ in history[index + 1 :])
        return False

    async def wait_state(self, state: str, *, timeout: float) -> float:
        return await self.call.wait_until(lambda: self.controller.state == state, timeout=timeout)

    async def wait_step(
        self, predicate: Callable[[TraceStep], bool], *, timeout: float, after: int = 0
    ) -> TraceStep:
        """Wait for a trace step (at index ``after`` or later) that matches."""

        def find() -> TraceStep | None:
            return next((s for s in self.steps[after:] if predicate(s)), None)

        await self.call.wait_until(lambda: find() is not None, timeout=timeout)
        found = find()
        assert found is not None
        return found

    async def wait_reply_after(self, user_text: str, *, timeout: float) -> None:
        await self.call.wait_until(lambda: self.replied_after(user_text), timeout=timeout)

    async def wait_detached(self, *, timeout: float = 8.0) -> None:
        await self.call.wait_until(lambda: adapter_for(self.session) is None, timeout=timeout)

    def released(self) -> list[str]:
        """What is still held on the caller: empty when input and turns are released."""
        problems = []
        gate = self.adapter.gate
        if gate is None:
            if self.controller.policy.can_mute_input:
                problems.append("no input gate was installed")
        elif gate.muted:
            problems.append("input gate still muted")
        if self.adapter.held_turn_settings is not None:
            problems.append(f"user turns still held: {self.adapter.held_turn_settings}")
        if self.session.turn_detection != self.turn_detection:
            problems.append(
                f"turn detection {self.session.turn_detection!r}, was {self.turn_detection!r}"
            )
        discard = self.session.options.interruption["discard_audio_if_uninterruptible"]
        if discard != self.discard_audio:
            problems.append(
                f"discard_audio_if_uninterruptible {discard}, was {self.discard_audio}"
            )
        return problems

    def describe(self) -> str:
        lines = [f"--- {self.name}: state {self.state}"]
        lines += [
            f"{s.at:6.2f} {s.before}->{s.after} {s.event!r:.120} {[e.name for e in s.effects]}"
            for s in self.steps
        ]
        lines += [f"history: {role}: {text!r}" for role, text in self.history()]
        lines += self.notes
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def fault_call(
    policy: TurnPolicy,
    script: Any = (),
    *,
    name: str = "call",
    agent: Agent | None = None,
    answer: bool = True,
    keep_text: bool = True,
    end_call: Callable[[str], None] | None = None,
    controller: TurnController | None = None,
    **sim_options: Any,
) -> AsyncIterator[FaultCall]:
    """A started simulated call with a strict controller attached (outbound calls are
    answered at once unless ``answer`` is False). Closing it closes the session.

    ``controller`` replaces the default ``TurnController(policy, strict=True,
    keep_text=keep_text)``."""
    if controller is None:
        controller = TurnController(policy, strict=True, keep_text=keep_text)
    holder: dict[str, Any] = {}

    def before_start(session: AgentSession) -> None:
        # the outcome monitor reports (not raises) what a provoked failure leaves behind
        holder["adapter"] = attach(session, controller, end_call=end_call, strict=False)
        holder["turn_detection"] = session.turn_detection
        holder["discard"] = session.options.interruption["discard_audio_if_uninterruptible"]

    call = SimulatedCall(
        script,
        agent=agent if agent is not None else TurnAgent(instructions="You are on a call."),
        before_start=before_start,
        **sim_options,
    )
    async with call:
        adapter = holder["adapter"]
        fault = FaultCall(
            name=name,
            call=call,
            controller=controller,
            adapter=adapter,
            turn_detection=holder["turn_detection"],
            discard_audio=holder["discard"],
        )
        if answer and policy.direction == "outbound":
            adapter.dispatch(CallAnswered(at=adapter.now()))
        yield fault


# -- many calls at once --------------------------------------------------------------------


async def run_all(
    scenarios: dict[str, Callable[[], Awaitable[Any]]],
) -> dict[str, Any]:
    """Run every scenario concurrently; each name maps to its result or its exception."""
    names = list(scenarios)
    results = await asyncio.gather(*(scenarios[n]() for n in names), return_exceptions=True)
    return dict(zip(names, results, strict=True))


def result_of(results: dict[str, Any], name: str) -> Any:
    """A scenario's result; its exception is re-raised (in the test that asks for it)."""
    result = results[name]
    if isinstance(result, BaseException):
        raise result
    return result


def run_in_new_loop(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``asyncio.run`` on the virtual clock, for module fixtures (no loop runs while fixtures
    are set up)."""
    return clock.run(main())


# -- logs ----------------------------------------------------------------------------------


class LogCapture(logging.Handler):
    """Every record of the ``turnfsm`` loggers, DEBUG and up, while installed; and in
    :attr:`escapes` every exception that reached LiveKit's event emitter (which logs
    ``failed to emit event ...`` on the ``livekit`` logger instead of raising)."""

    def __init__(self, logger_name: str = "turnfsm") -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.escapes: list[logging.LogRecord] = []
        self._logger = logging.getLogger(logger_name)
        self._level = self._logger.level
        self._escape_handler = _EscapeHandler(self.escapes)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> LogCapture:
        self._logger.addHandler(self)
        self._level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        logging.getLogger("livekit").addHandler(self._escape_handler)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)
        logging.getLogger("livekit").removeHandler(self._escape_handler)

    def at_least(self, level: int) -> list[logging.LogRecord]:
        return [r for r in self.records if r.levelno >= level]

    def text(self) -> str:
        """All records, formatted with their tracebacks (what a log file would hold)."""
        formatter = logging.Formatter("%(levelname)s %(name)s %(message)s")
        return "\n".join(formatter.format(record) for record in self.records)


class _EscapeHandler(logging.Handler):
    def __init__(self, escapes: list[logging.LogRecord]) -> None:
        super().__init__(level=logging.ERROR)
        self._escapes = escapes

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("failed to emit event"):
            self._escapes.append(record)


def escaped(records: Iterable[logging.LogRecord]) -> list[str]:
    """Exceptions that LiveKit's emitter caught from a handler (``caplog.records``)."""
    return [r.getMessage() for r in records if r.getMessage().startswith("failed to emit event")]


# -- tasks ---------------------------------------------------------------------------------


class TaskLedger:
    """Remembers the tasks created with turnfsm code (not the simulation) on the stack, and
    for each the adapter whose code created it (when a frame of ours names one)."""

    def __init__(self) -> None:
        self._ours: weakref.WeakKeyDictionary[asyncio.Task[Any], int | None] = (
            weakref.WeakKeyDictionary()
        )

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            task = asyncio.Task(coro, loop=loop, **kwargs)
            ours, adapter = _created_by_turnfsm()
            if ours:
                self._ours[task] = adapter
            return task

        loop.set_task_factory(factory)

    def pending(self, adapter: TurnAdapter | None = None) -> list[asyncio.Task[Any]]:
        """Tasks created by turnfsm code (for ``adapter``, if given) that are not done."""
        return [
            task
            for task, owner in list(self._ours.items())
            if not task.done() and (adapter is None or owner == id(adapter))
        ]


def _created_by_turnfsm() -> tuple[bool, int | None]:
    frame: Any = sys._getframe(2)
    ours, adapter = False, None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(TURNFSM_ROOT) and not filename.startswith(SIM_ROOT):
            ours = True
            for name in ("self", "adapter"):
                if isinstance(value := frame.f_locals.get(name), TurnAdapter):
                    adapter = id(value)
        frame = frame.f_back
    return ours, adapter


# -- an STT whose speech the test injects ----------------------------------------------------


class InjectedSTT(stt.STT):
    """A streaming STT that hears nothing by itself: :meth:`speak` makes it report one
    utterance (start of speech, final transcript, end of speech) on its live stream."""

    def __init__(self) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=True, interim_results=False))
        self.streams: list[_InjectedStream] = []

    @property
    def model(self) -> str:
        return "injected"

    @property
    def provider(self) -> str:
        return "turnfsm.tests"

    async def _recognize_impl(
        self, buffer: AudioBuffer, *, language: Any = NOT_GIVEN, conn_options: APIConnectOptions
    ) -> stt.SpeechEvent:
        raise NotImplementedError("InjectedSTT only has live streams")

    def stream(
        self,
        *,
        language: Any = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.RecognizeStream:
        stream = _InjectedStream(stt=self, conn_options=conn_options)
        self.streams.append(stream)
        return stream

    @property
    def ready(self) -> bool:
        return bool(self.streams)

    def speak(self, text: str) -> None:
        """The user says ``text`` (as one final transcript)."""
        channel = self.streams[-1]._event_ch
        channel.send_nowait(stt.SpeechEvent(type=stt.SpeechEventType.START_OF_SPEECH))
        channel.send_nowait(
            stt.SpeechEvent(
                type=stt.SpeechEventType.FINAL_TRANSCRIPT,
                alternatives=[stt.SpeechData(language="en", text=text)],
            )
        )
        channel.send_nowait(stt.SpeechEvent(type=stt.SpeechEventType.END_OF_SPEECH))


class _InjectedStream(stt.RecognizeStream):
    async def _run(self) -> None:
        async for _ in self._input_ch:
            pass


STT_TURN_HANDLING: dict[str, Any] = {
    "turn_detection": "stt",
    "endpointing": {"min_delay": 0.05, "max_delay": 0.5},
    "preemptive_generation": {"enabled": False},
    "interruption": {"mode": "vad"},
}
"""Turn handling of an :class:`InjectedSTT` session: turns end 50 ms after the speech."""


async def wait_for(condition: Callable[[], bool], *, timeout: float, what: str = "") -> None:
    """Poll ``condition`` every 10 ms; TimeoutError naming ``what`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            raise TimeoutError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


def names(items: Iterable[Any]) -> list[str]:
    return [getattr(item, "name", type(item).__name__) for item in items]
