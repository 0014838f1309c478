"""Test your own agent's turn-taking: simulated calls written as text, on a virtual clock.

Your ``TurnAgent`` subclass and your ``TurnPolicy`` run in a real LiveKit ``AgentSession``
(LiveKit's own turn handling, the silero VAD) that hears a simulated caller: the caller's
lines are written as text with the time they start (:class:`CallerLine`), the models are
scripted (``replies=``: the LLM's answers, tool calls included), and the agent's speech is
played out to a simulated loudspeaker, so what the caller *heard* is measured. On the
virtual clock (:class:`~turnfsm.adapters.sim.clock.VirtualClockLoop`) a minute of call takes
a fraction of a second, the same way every time.

With the pytest plugin (``pytest_plugins = ["turnfsm.adapters.sim.testing"]`` in your
top-level ``conftest.py``)::

    from turnfsm.testing import CallerLine

    async def test_the_greeting_plays_whole(turnfsm_call):
        call = await turnfsm_call(
            Caller(),  # your agent
            build_policy(),  # your policy
            caller=[CallerLine("Hello?", at=0.5)],
            replies=["We open at nine."],
        )
        await call.run()  # until every line was said and the call is quiet
        call.expect.greeting_played_whole()
        call.expect.no_breach()
        assert call.history[:2] == [("user", "Hello?"), ("assistant", GREETING)]

A failing test shows the call: its trace on the call's clock, the history and what was
played (:meth:`SimulatedTurnCall.describe`), and the paths of its timeline (SVG) and trace
(JSON lines). Each ``call.expect`` check says what failed and appends the same description.

Without the plugin, :func:`simulate_call` is an async context manager (run it on a
:class:`~turnfsm.adapters.sim.clock.VirtualClockLoop`).

:func:`pytest_asyncio_loop_factories` runs a test on the virtual clock when it uses the
``turnfsm_call`` fixture or is marked ``@pytest.mark.virtual_clock``; every other async
test keeps an ordinary event loop (a test that reaches a real service must: on the virtual
clock a network wait would time out at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio
from livekit.agents import Agent

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter, attach
from turnfsm.adapters.livekit.outcomes import OutcomeBreach
from turnfsm.spoken import spoken_prefix
from turnfsm.tools.timeline import render_timeline
from turnfsm.trace import TraceStep

from .clock import VirtualClockLoop
from .models import ReplyScript, ScriptedLLM, ScriptedReply, ScriptedToolCall, ScriptedTTS
from .session import SimulatedCall
from .speech import CallScript, SpeechLine, UserLine, spoken_line

__all__ = [
    "AgentSpeech",
    "CallerLine",
    "ScriptedLLM",
    "ScriptedReply",
    "ScriptedToolCall",
    "SimulatedTurnCall",
    "pytest_asyncio_loop_factories",
    "simulate_call",
    "turnfsm_call",
]

PLAYED_SECONDS_TOLERATED = 0.05
"""Playout positions are measured to about a frame."""

QUIET_SECONDS = 2.0
"""How long a call must stay quiet (nothing said, nothing pending) for :meth:`run` to end:
longer than LiveKit's end of turn after the caller's last words (VAD silence plus
``endpointing.min_delay``), so a reply still to come is waited for."""


# ------------------------------------------------------------------------------ the script


@dataclass(frozen=True)
class CallerLine:
    """One line the simulated caller says: speech made from the text, no recording needed
    (:func:`~turnfsm.adapters.sim.speech.spoken_line`).

    Attributes:
        text: What the caller says, as the STT will transcribe it.
        at: When the caller starts saying it, in seconds of call time (the caller's audio
            starts at 0).
        duration: How long saying it takes, in seconds (at least 0.2); by default 14
            characters a second.

    Raises:
        ValueError: naming the field (``CallerLine.at must be ...``).
    """

    text: str
    at: float
    duration: float | None = None
    speech: SpeechLine = field(init=False, repr=False, compare=False)
    """The line's audio and word timings."""

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, int | float) or not self.at >= 0:
            raise ValueError(f"CallerLine.at must be a call time >= 0, got {self.at!r}")
        object.__setattr__(self, "speech", _spoken(self.text, self.duration, "CallerLine"))

    def user_line(self) -> UserLine:
        """The line as the simulated audio input plays it."""
        return UserLine(self.at, self.speech)


def _spoken(text: str, duration: float | None, owner: str) -> SpeechLine:
    """``spoken_line(text, duration=duration)``; a bad argument names ``owner``'s field."""
    try:
        return spoken_line(text, duration=duration)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{owner}.{error}") from None


# ----------------------------------------------------------------------------- the outcome


@dataclass(frozen=True)
class AgentSpeech:
    """One speech of the agent, as the call's trace and loudspeaker saw it.

    Times are call times (seconds since the caller's audio started).

    Attributes:
        speech_id: LiveKit's speech id.
        created_at: When LiveKit created it.
        started_at: When its first audio played (None: it never played).
        ended_at: When it was done (None: still going).
        text: Everything it was to say (the reply's text before any cut; None when LiveKit
            committed nothing, e.g. stopped before it started).
        committed: What the history keeps of it now (None: nothing, or removed).
        played_seconds: How much of its audio the caller heard.
        audio_seconds: How long its whole audio is (the scripted TTS's length of ``text``).
        interrupted: Whether it was cut short.
        greeting: Whether it is the call's greeting.
    """

    speech_id: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    text: str | None
    committed: str | None
    played_seconds: float
    audio_seconds: float
    interrupted: bool
    greeting: bool

    @property
    def heard(self) -> str:
        """The words of :attr:`text` the caller heard to their end
        (:func:`turnfsm.spoken.spoken_prefix`)."""
        if self.text is None:
            return ""
        return spoken_prefix(self.text, self.played_seconds, self.audio_seconds)

    @property
    def played_whole(self) -> bool:
        """It played to its end, uncut."""
        return (
            self.ended_at is not None
            and not self.interrupted
            and self.played_seconds >= self.audio_seconds - PLAYED_SECONDS_TOLERATED
        )


@dataclass
class SimulatedTurnCall:
    """A simulated call of your agent under your policy, with what it did.

    Attributes:
        call: The simulated call (session, audio IO, scripted models, recorded events).
        controller: The call's turn controller (``strict``, ``keep_text``).
        adapter: The LiveKit adapter driving the session.
        caller: The caller's lines.
        logged: Warnings and errors turnfsm logged during the call (a lever that failed,
            a controller step that raised): :meth:`Expect.no_breach` fails on them.
    """

    call: SimulatedCall
    controller: TurnController
    adapter: TurnAdapter
    caller: tuple[CallerLine, ...]
    offset: float = 0.0
    """Call time minus adapter time (both clocks run on the same event loop)."""
    logged: list[logging.LogRecord] = field(default_factory=list)

    # -- running ------------------------------------------------------------------------

    def now(self) -> float:
        """Call time: seconds since the caller's audio started."""
        return self.call.now()

    async def run(self, until: float | None = None, *, timeout: float = 300.0) -> None:
        """Let the call go on.

        Args:
            until: Run to this call time. By default, until every caller line has been said
                and the call has been quiet for :data:`QUIET_SECONDS` (no speech pending
                or playing, the caller silent, no step of the machine), or has ended.
            timeout: Call time by which the call must be quiet.

        Raises:
            AssertionError: The call was not quiet by ``timeout`` (with the description).
        """
        if until is not None:
            await asyncio.sleep(max(0.0, until - self.now()))
            return
        last_line = max((line.at for line in self.caller), default=0.0)
        steps, quiet_since = -1, self.now()
        while True:
            count = len(self.steps)
            if count != steps or not self._quiet() or self.now() < last_line:
                steps, quiet_since = count, self.now()
            elif self.now() - quiet_since >= QUIET_SECONDS or self.controller.state == "ended":
                return
            if self.now() >= timeout:
                raise AssertionError(
                    f"the call was not quiet after {timeout} s of call time\n\n{self.describe()}"
                )
            await asyncio.sleep(0.1)

    def _quiet(self) -> bool:
        session = self.call.session
        playing = any(not s.finished for s in self.call.audio_output.segments)
        speaking = any(line.ended_at is None for line in self.call.ledger.utterances)
        return (
            not playing
            and not speaking
            and session.current_speech is None
            and not any(not handle.done() for handle in self.adapter.speeches.values())
        )

    def say(self, text: str, *, duration: float | None = None) -> None:
        """The caller says ``text`` now (from the next audio frame, or right after the line
        being said), e.g. in reaction to what the agent did so far."""
        self.call.audio_input.say_now(_spoken(text, duration, "say"))

    # -- what happened ------------------------------------------------------------------

    @property
    def steps(self) -> list[TraceStep]:
        """The controller's trace so far."""
        assert self.controller.trace is not None
        return list(self.controller.trace.steps)

    @property
    def history(self) -> list[tuple[str, str]]:
        """``(role, text)`` of every message in ``session.history``, in order."""
        return [(m.role, m.text_content or "") for m in self.call.messages()]

    @property
    def speeches(self) -> list[AgentSpeech]:
        """Every speech of the agent, in the order LiveKit created them."""
        return _speeches(self)

    @property
    def greeting(self) -> AgentSpeech | None:
        """The greeting's speech (None: none was started)."""
        return next((speech for speech in self.speeches if speech.greeting), None)

    @property
    def tool_rounds(self) -> list[int]:
        """Tool rounds LiveKit ran after each user turn, one count per committed turn (the
        first words the greeting started on, from their final transcript, count as one)."""
        return [len(turn.tool_rounds) for turn in _user_turns(self)]

    @property
    def breaches(self) -> list[OutcomeBreach]:
        """The outcome monitor's breaches (O1-O7, :mod:`turnfsm.adapters.livekit.outcomes`)."""
        return list(self.adapter.outcomes.breaches)

    @property
    def expect(self) -> Expect:
        """Checks of the call's outcome, each failing with the call's description."""
        return Expect(self)

    def describe(self) -> str:
        """The call as text: the caller's lines, the machine's steps (call time, state
        change, event, effects), the history and the loudspeaker's segments."""
        return describe_call(self.call, self.steps, self.offset)

    def timeline_svg(self) -> str:
        """The call's timeline (:func:`turnfsm.tools.timeline.render_timeline`)."""
        assert self.controller.trace is not None
        return render_timeline(self.controller.trace)

    def write(self, folder: Path, name: str = "call") -> tuple[Path, Path]:
        """Write the call's trace (``<name>.jsonl``, read by ``turnfsm timeline`` and
        ``turnfsm report``) and timeline (``<name>.svg``) into ``folder``."""
        assert self.controller.trace is not None
        folder.mkdir(parents=True, exist_ok=True)
        trace, timeline = folder / f"{name}.jsonl", folder / f"{name}.svg"
        trace.write_text(self.controller.trace.to_jsonl(), encoding="utf-8")
        timeline.write_text(self.timeline_svg(), encoding="utf-8")
        return trace, timeline


@dataclass
class _UserTurn:
    at: float
    tool_rounds: list[float] = field(default_factory=list)
    """When each tool round LiveKit ran for the turn finished."""


def _user_turns(turn_call: SimulatedTurnCall) -> list[_UserTurn]:
    turns: list[_UserTurn] = []
    for step in turn_call.steps:
        at = step.at + turn_call.offset
        taken = isinstance(step.event, ev.UserTranscript) and step.before != step.after
        if isinstance(step.event, ev.UserTurnCommitted) or taken:
            turns.append(_UserTurn(at))
        elif isinstance(step.event, ev.ToolStepFinished) and turns:
            turns[-1].tool_rounds.append(at)
    return turns


def _speeches(turn_call: SimulatedTurnCall) -> list[AgentSpeech]:
    found: dict[str, dict[str, Any]] = {}
    greeting_id = turn_call.controller.context.greeting_speech_id
    for step in turn_call.steps:
        event, at = step.event, step.at + turn_call.offset
        speech_id = getattr(event, "speech_id", None)
        if isinstance(event, ev.AgentSpeechCreated):
            found[event.speech_id] = {"created_at": at, "greeting": False}
        if speech_id not in found:
            continue
        record = found[speech_id]
        if step.before == "greeting" and any(
            getattr(effect, "speech_id", None) == speech_id and effect.name == "lock_speech"
            for effect in step.effects
        ):
            record["greeting"] = True
        if isinstance(event, ev.AgentSpeechStarted):
            record.setdefault("started_at", at)
        elif isinstance(event, ev.AssistantMessageCommitted):
            record["text"], record["item_id"] = event.text, event.item_id
        elif isinstance(event, ev.AgentSpeechEnded):
            record.update(ended_at=at, interrupted=event.interrupted, played=event.played_seconds)
    history = turn_call.call.session.history
    tts = turn_call.call.tts
    speeches = []
    for speech_id, record in found.items():
        text = record.get("text")
        item = history.get_by_id(record["item_id"]) if "item_id" in record else None
        speeches.append(
            AgentSpeech(
                speech_id=speech_id,
                created_at=record["created_at"],
                started_at=record.get("started_at"),
                ended_at=record.get("ended_at"),
                text=text,
                committed=getattr(item, "text_content", None),
                played_seconds=record.get("played", 0.0),
                audio_seconds=tts.duration_of(text) if text else 0.0,
                interrupted=record.get("interrupted", False),
                greeting=record["greeting"] or speech_id == greeting_id,
            )
        )
    return speeches


def describe_call(call: SimulatedCall, steps: Sequence[TraceStep], offset: float) -> str:
    """A simulated call as text, for assertion messages: the caller's lines as played,
    each machine step on the call's clock, the history, the loudspeaker's segments."""
    started = call.audio_input.started_at or 0.0
    lines = [
        f"caller {u.started_at - started:6.2f}-"
        f"{'...' if u.ended_at is None else f'{u.ended_at - started:.2f}'} {u.line.text!r}"
        for u in call.ledger.utterances
    ]
    lines += [
        f"{s.at + offset:6.2f} {s.before}->{s.after} {s.event!r:.110} "
        f"{[e.name for e in s.effects]}"
        for s in steps
    ]
    lines += [f"history: {m.role}: {m.text_content!r}" for m in call.messages()]
    lines += [
        f"segment {s.index}: "
        f"start={None if s.started_at is None else round(s.started_at - started, 2)} "
        f"pushed={s.pushed:.2f} played={s.played:.2f} interrupted={s.interrupted}"
        for s in call.audio_output.segments
    ]
    return "\n".join(lines)


class Expect:
    """Checks of a :class:`SimulatedTurnCall`'s outcome (``call.expect``). Each raises
    ``AssertionError`` saying what failed, followed by the call's description."""

    def __init__(self, call: SimulatedTurnCall) -> None:
        self._call = call

    def that(self, condition: object, what: str) -> None:
        """Fail with ``what`` and the call's description unless ``condition`` holds."""
        if not condition:
            raise AssertionError(f"{what}\n\n{self._call.describe()}")

    def greeting_played_whole(self) -> AgentSpeech:
        """The greeting was said and the caller heard all of it, and no agent audio came
        before it (outcome checks O1, O2). Returns the greeting's speech."""
        greeting = self._call.greeting
        self.that(greeting is not None, "no greeting was started")
        assert greeting is not None
        self.that(
            greeting.played_whole,
            f"the greeting did not play whole: {greeting.played_seconds:.2f} s of "
            f"{greeting.audio_seconds:.2f} s played, interrupted={greeting.interrupted}, "
            f"ended={greeting.ended_at is not None}",
        )
        greeted_at = greeting.started_at if greeting.started_at is not None else float("inf")
        early = [
            speech
            for speech in self._call.speeches
            if speech.started_at is not None and speech.started_at < greeted_at
        ]
        self.that(not early, f"agent audio played before the greeting: {early}")
        self._no_breach_of("O1", "O2")
        return greeting

    def history(self, expected: Sequence[tuple[str, str]]) -> None:
        """``session.history``'s messages are exactly ``expected`` (``(role, text)``)."""
        actual = self._call.history
        self.that(actual == list(expected), f"history {actual!r} != expected {list(expected)!r}")

    def committed_as_heard(self) -> None:
        """Every assistant message the history keeps is a word prefix of what the caller
        heard of its speech: the model is never told it said what nobody heard
        (``interrupted_text="spoken"`` or ``"drop"``; outcome check O4)."""
        for speech in self._call.speeches:
            if speech.committed is None or speech.text is None:
                continue
            committed, heard = speech.committed.split(), speech.heard.split()
            self.that(
                committed == heard[: len(committed)],
                f"speech {speech.speech_id} keeps {speech.committed!r} in the history, but "
                f"the caller heard only {speech.heard!r} "
                f"({speech.played_seconds:.2f} s of {speech.audio_seconds:.2f} s)",
            )
        self._no_breach_of("O4")

    def tool_rounds_capped(self) -> None:
        """No user turn got more tool rounds than the policy's ``max_tool_steps``, and a
        turn that reached the cap still got a spoken reply (outcome check O5)."""
        cap = self._call.controller.policy.max_tool_steps
        rounds = self._call.tool_rounds
        self.that(all(n <= cap for n in rounds), f"tool rounds per turn {rounds} exceed {cap}")
        turns = _user_turns(self._call)
        ends = [turn.at for turn in turns[1:]] + [float("inf")]
        for turn, next_turn_at in zip(turns, ends, strict=True):
            if len(turn.tool_rounds) < cap:
                continue
            spoken = [
                speech
                for speech in self._call.speeches
                if speech.ended_at is not None
                and turn.tool_rounds[-1] <= speech.ended_at < next_turn_at
                and speech.played_seconds > 0
            ]
            self.that(
                spoken,
                f"the turn at {turn.at:.2f} s reached the cap of {cap} tool rounds and got no "
                "spoken reply after its last round",
            )
        self._no_breach_of("O5")

    def no_breach(self) -> None:
        """No outcome check (O1-O7) was breached and turnfsm logged no failure (a lever
        that raised, a controller step that failed)."""
        self._no_breach_of(*sorted({b.check for b in self._call.breaches}))
        logged = [f"{r.levelname}: {r.getMessage()}" for r in self._call.logged]
        self.that(not logged, "turnfsm logged failures:\n" + "\n".join(logged))

    def _no_breach_of(self, *checks: str) -> None:
        breaches = [str(b) for b in self._call.breaches if b.check in checks]
        self.that(not breaches, "outcome breached:\n" + "\n".join(breaches))


# -------------------------------------------------------------------------------- running


@contextlib.asynccontextmanager
async def simulate_call(
    agent: Agent,
    policy: TurnPolicy,
    *,
    caller: Sequence[CallerLine] = (),
    replies: ReplyScript = (),
    llm: ScriptedLLM | None = None,
    tts: ScriptedTTS | None = None,
    answer_at: float | None = 0.0,
    livekit_defaults: bool = True,
    session_options: Mapping[str, Any] | None = None,
) -> AsyncIterator[SimulatedTurnCall]:
    """Run ``agent`` under ``policy`` in a simulated call, and close it at the end.

    Args:
        agent: Your agent (a ``TurnAgent`` subclass, or an ``Agent`` where the policy
            allows one), a fresh instance.
        policy: Your policy.
        caller: What the caller says, and when.
        replies: The LLM's replies in order (text, or :class:`ScriptedReply` with
            :class:`ScriptedToolCall` s to call your agent's tools), or a function of the
            request (:class:`~turnfsm.adapters.sim.models.LLMRequest`).
        llm: A scripted LLM of your own instead (``replies`` is then not used).
        tts: The TTS (a :class:`ScriptedTTS`: its ``chars_per_second`` sets how long the
            agent's speech takes).
        answer_at: Outbound calls: when the callee picks up, in call time (``None``: the
            call keeps ringing).
        livekit_defaults: LiveKit's own turn handling and a transcript synchronizer in the
            output chain, as RoomIO has (else the simulation's: no preemptive generation,
            VAD interruptions, no synchronizer).
        session_options: Further ``AgentSession`` keyword arguments (``turn_handling``,
            ``max_tool_steps``, ``user_away_timeout``, ...).

    The call runs on the event loop that runs it: use a
    :class:`~turnfsm.adapters.sim.clock.VirtualClockLoop` (the pytest plugin does), or it
    takes as long as it lasts.
    """
    options = dict(session_options or {})
    turn_handling = options.pop("turn_handling", None)
    controller = TurnController(policy, strict=True, keep_text=True)
    holder: dict[str, TurnAdapter] = {}
    lines = tuple(caller)
    call = SimulatedCall(
        CallScript(line.user_line() for line in lines),
        agent=agent,
        llm=llm if llm is not None else ScriptedLLM(replies),
        tts=tts,
        livekit_defaults=livekit_defaults,
        transcript_sync=livekit_defaults,
        turn_handling=turn_handling,
        session_options=options,
        # the monitor collects its breaches (call.breaches) instead of raising them into
        # LiveKit's handlers; a controller step that breaks an invariant is logged (logged)
        before_start=lambda session: holder.setdefault(
            "adapter", attach(session, controller, strict=False)
        ),
    )
    with _recording_turnfsm_failures() as logged:
        async with call:
            adapter = holder["adapter"]
            turn_call = SimulatedTurnCall(
                call=call,
                controller=controller,
                adapter=adapter,
                caller=lines,
                offset=call.now() - adapter.now(),  # same loop, same instant: exact
                logged=logged,
            )
            answering = _answer(turn_call, answer_at) if policy.direction == "outbound" else None
            try:
                yield turn_call
            finally:
                if answering is not None:
                    answering.cancel()


def _answer(turn_call: SimulatedTurnCall, at: float | None) -> asyncio.TimerHandle | None:
    """Pick up the outbound call at call time ``at`` (a SIP call's ``sip.callStatus``)."""
    if at is None:
        return None
    adapter = turn_call.adapter

    def answered() -> None:
        adapter.dispatch(ev.CallAnswered(at=adapter.now()))

    if at <= turn_call.now():
        answered()
        return None
    return asyncio.get_running_loop().call_later(at - turn_call.now(), answered)


class _Records(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(level=logging.WARNING)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _recording_turnfsm_failures() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    handler = _Records(records)
    turnfsm_logger = logging.getLogger("turnfsm")
    turnfsm_logger.addHandler(handler)
    try:
        yield records
    finally:
        turnfsm_logger.removeHandler(handler)


# -------------------------------------------------------------------------- pytest plugin

_CALLS = pytest.StashKey[tuple[list[SimulatedTurnCall], Callable[[], Path]]]()
"""A test's calls, and where to write them if it fails."""
FIXTURE = "turnfsm_call"


class CallFactory(Protocol):
    """``turnfsm_call``: ``await turnfsm_call(agent, policy, caller=..., ...)``."""

    def __call__(
        self, agent: Agent, policy: TurnPolicy, **options: Any
    ) -> Awaitable[SimulatedTurnCall]: ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "virtual_clock: run this async test on turnfsm's virtual clock (tests using the "
        "turnfsm_call fixture are)",
    )


def runs_on_virtual_clock(item: pytest.Item) -> bool:
    """Whether turnfsm's plugin runs this test on the virtual clock."""
    fixtures = getattr(item, "fixturenames", ())
    return FIXTURE in fixtures or item.get_closest_marker("virtual_clock") is not None


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: the virtual clock for turnfsm's tests, an ordinary loop (from
    the event loop policy in force, as without the hook) for every other test.

    The hook takes the first answer: if your ``conftest.py`` implements it too, return this
    function's answer for the tests :func:`runs_on_virtual_clock` names."""
    if runs_on_virtual_clock(item):
        return {"virtual_clock": VirtualClockLoop}
    return {"asyncio": asyncio.new_event_loop}


@pytest_asyncio.fixture(loop_scope="function")  # the test's own loop, whatever the config
async def turnfsm_call(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[CallFactory]:
    """Start simulated calls of your agent (:func:`simulate_call`'s arguments); each is
    closed when the test ends. A test using it runs on the virtual clock; when it fails,
    its report shows each call's description, and the call's trace and timeline are
    written to a temporary folder named there."""
    if not isinstance(asyncio.get_running_loop(), VirtualClockLoop):
        raise pytest.UsageError(
            f"{request.node.nodeid} runs on {type(asyncio.get_running_loop()).__name__}, not "
            "on turnfsm's virtual clock: a pytest_asyncio_loop_factories hook of yours "
            "answered first. Return turnfsm.adapters.sim.testing."
            "pytest_asyncio_loop_factories(config, item) for the tests that use turnfsm_call."
        )
    calls: list[SimulatedTurnCall] = []
    request.node.stash[_CALLS] = calls, lambda: tmp_path_factory.mktemp("turnfsm-call")
    async with contextlib.AsyncExitStack() as stack:

        async def start(agent: Agent, policy: TurnPolicy, **options: Any) -> SimulatedTurnCall:
            call = await stack.enter_async_context(simulate_call(agent, policy, **options))
            calls.append(call)
            return call

        yield start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    calls, make_folder = item.stash.get(_CALLS, ([], Path))
    if report.when == "call" and report.failed and calls:
        folder = make_folder()
        for index, turn_call in enumerate(calls):
            trace, timeline = turn_call.write(folder, f"call{index}")
            report.sections.append(
                (
                    f"turnfsm call {index}",
                    f"{turn_call.describe()}\n\ntrace: {trace}\ntimeline: {timeline}",
                )
            )
    return report
