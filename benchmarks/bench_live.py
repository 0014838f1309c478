"""The controller inside a live LiveKit ``AgentSession``: reaction time and CPU share.

Targets (GitHub issue 6, item 1, the live part): an effect's lever runs in the same
event-loop callback as the LiveKit event that caused it (0 extra loop iterations), at
most 0.5 ms after LiveKit emits the event (p99); over a whole call the controller
(``TurnController.handle`` plus the levers) uses at most 1 % of one core.

Both sections run a real ``AgentSession`` of the offline simulation
(:class:`~turnfsm.adapters.sim.session.SimulatedCall`: silero VAD on paced audio,
scripted LLM/STT/TTS), with the adapter attached as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import SpeechCreatedEvent, UserStateChangedEvent

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, attach
from turnfsm.adapters.livekit.levers import LEVERS
from turnfsm.adapters.livekit.port import Lever, LeverPort, Site
from turnfsm.adapters.sim.models import ScriptedLLM
from turnfsm.adapters.sim.session import SimulatedCall, load_silero_vad
from turnfsm.adapters.sim.speech import CallScript, UserLine
from turnfsm.context import TurnContext
from turnfsm.events import CallAnswered, CallEnded
from turnfsm.testing import fresh_context

from .harness import Config, Row, Section, gc_paused, ratio, verdict

REACTION_P99_TARGET_US = 500.0
"""From LiveKit emitting an event to the effect's lever being called, p99, in µs."""
EXTRA_ITERATIONS_TARGET = 0
"""Event-loop iterations between the emit and the lever: the lever runs in the callback."""
CPU_SHARE_TARGET = 1.0
"""The controller's CPU (handle + levers) over a call, in % of one core."""

GREETING = "Hi, this is Ada from Acme Dental."
ANSWER = (
    "We open at nine. On Tuesdays and Thursdays we stay open late, until seven in the "
    "evening. On Saturdays we open at ten and close at two."
)
POLICY = TurnPolicy(direction="outbound", greeting=GREETING)
LINES = (UserLine(0.3, "hello"), UserLine(4.4, "question"), UserLine(9.6, "stop"))
HANG_UP_AT = 11.0
"""Call time of the hang-up: "Hello?", the greeting, a question, the answer, and the
callee's "Wait, stop" cutting the answer short at ~9.7 s."""


def lever_table(adapter: TurnAdapter) -> dict[type[fx.Effect], Any]:
    """The table the adapter looks its levers up in: its own copy when it keeps one,
    else the module's :data:`~turnfsm.adapters.livekit.levers.LEVERS`."""
    table = getattr(adapter, "levers", None)
    return table if isinstance(table, dict) else LEVERS


@contextmanager
def lever_shim(
    table: dict[type[fx.Effect], Any], wrap: Callable[[type[fx.Effect], Any], Any]
) -> Iterator[None]:
    """Replace every lever of ``table`` by ``wrap(effect type, lever)`` (benchmark only;
    restored on exit)."""
    originals = dict(table)
    for kind, lever in originals.items():
        table[kind] = wrap(kind, lever)
    try:
        yield
    finally:
        table.update(originals)


def _percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- 1. reaction -------------------------------------------------------------------------

PACINGS = {"back-to-back": 0.0, "paced 2 ms apart": 0.002}
"""Idle time before each emit: none (hot caches), or the loop idle in between, as in a
call where events arrive tens of milliseconds apart."""


@dataclass
class _Probe:
    """What the lever shim saw for the sample in flight."""

    expect: type[fx.Effect] | None = None
    sample: int = 0
    lever_ns: int | None = None
    lever_cpu_ns: int = 0
    lever_tick: int = 0
    handle_ns: int = 0


@dataclass
class _Case:
    label: str
    effect: type[fx.Effect]
    state: str
    emit: Callable[[], tuple[str, Any]]
    """A fresh (event name, LiveKit event) to emit."""
    pace: float
    context: TurnContext = field(default_factory=TurnContext)
    """The call's context when the event comes."""
    latencies: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    iterations: list[float] = field(default_factory=list)
    handle_us: list[float] = field(default_factory=list)


def _user_speaks() -> tuple[str, Any]:
    return "user_state_changed", UserStateChangedEvent(old_state="listening", new_state="speaking")


def _speech_created() -> tuple[str, Any]:
    handle = SpeechHandle.create(allow_interruptions=True)
    return "speech_created", SpeechCreatedEvent(
        user_initiated=True, source="say", speech_handle=handle
    )


def _reaction_cases() -> list[_Case]:
    return [
        case
        for pacing, pace in PACINGS.items()
        for case in (
            _Case(
                f"CancelTimer ← user_state_changed(speaking) in awaiting_user, {pacing}",
                fx.CancelTimer,
                "awaiting_user",
                _user_speaks,
                pace,
                fresh_context("awaiting_user", POLICY),
            ),
            _Case(
                f"LockSpeech ← speech_created in greeting, {pacing}",
                fx.LockSpeech,
                "greeting_requested",  # the greeting's phase that waits for its speech
                _speech_created,
                pace,
                fresh_context("greeting_requested", POLICY),
            ),
        )
    ]


async def _measure_reaction(cases: list[_Case], rounds: int, per_round: int) -> None:
    loop = asyncio.get_running_loop()
    probe = _Probe()
    ticks = 0

    def tick(sample: int) -> None:
        """Counts event-loop iterations while the sample's lever has not run yet."""
        nonlocal ticks
        ticks += 1
        if sample == probe.sample and probe.lever_ns is None:
            loop.call_soon(tick, sample)

    def on_lever(kind: type[fx.Effect], lever: Lever) -> Any:
        def shimmed(port: LeverPort, effect: fx.Effect, site: Site) -> None:
            if kind is probe.expect and probe.lever_ns is None:
                probe.lever_ns = time.perf_counter_ns()
                probe.lever_cpu_ns = time.thread_time_ns()
                probe.lever_tick = ticks
            lever(port, effect, site)

        return shimmed

    controller = TurnController(POLICY)
    handle = controller.handle

    def timed_handle(event: Any) -> tuple[fx.Effect, ...]:
        start = time.perf_counter_ns()
        try:
            return handle(event)
        finally:
            probe.handle_ns += time.perf_counter_ns() - start

    controller.handle = timed_handle  # type: ignore[method-assign]
    adapters: list[TurnAdapter] = []
    call = SimulatedCall(
        CallScript([]),  # a silent callee: only the emitted events reach the machine
        agent=TurnAgent(instructions="You are on a call."),
        before_start=lambda session: adapters.append(attach(session, controller)),
    )
    async with call:
        adapter, session = adapters[0], call.session
        with lever_shim(lever_table(adapter), on_lever):
            for round_number in range(rounds + 1):  # round 0 is a discarded warm-up
                with gc_paused():
                    for case in cases:
                        for _ in range(per_round):
                            controller.restore(case.state, case.context.copy())
                            name, event = case.emit()
                            await asyncio.sleep(case.pace)
                            probe.expect, probe.lever_ns, probe.handle_ns = case.effect, None, 0
                            probe.sample += 1
                            loop.call_soon(tick, probe.sample)
                            tick_before = ticks
                            cpu = time.thread_time_ns()
                            start = time.perf_counter_ns()
                            session.emit(name, event)
                            for _ in range(100):  # were the lever deferred: wait for it
                                if probe.lever_ns is not None:
                                    break
                                await asyncio.sleep(0)
                            if probe.lever_ns is None:
                                raise RuntimeError(f"{case.label}: the lever was not called")
                            if round_number:
                                case.latencies.append((probe.lever_ns - start) / 1000)
                                case.cpu.append((probe.lever_cpu_ns - cpu) / 1000)
                                case.iterations.append(probe.lever_tick - tick_before)
                                case.handle_us.append(probe.handle_ns / 1000)
                            adapter.speeches.clear()
        adapter.detach()


def reaction(config: Config) -> Section:
    load_silero_vad()
    cases = _reaction_cases()
    per_round = 50
    asyncio.run(_measure_reaction(cases, config.rounds, per_round))
    rows: list[Row] = []
    notes = []
    for case in cases:
        p99 = _percentile(case.latencies, 99)
        limit, over = REACTION_P99_TARGET_US, p99 - REACTION_P99_TARGET_US
        rows.append(
            Row(
                f"{case.label}: p50",
                case.latencies,
                "µs",
                ratios=f"p99 {p99:,.0f} µs, max {max(case.latencies):,.0f} µs",
                target=verdict(
                    p99 <= REACTION_P99_TARGET_US, f"p99 ≤ {limit:g} µs; {over:+,.0f} µs"
                ),
            )
        )
        notes.append(
            f"{case.label}: p50 {statistics.median(case.latencies):.0f} µs, of which "
            f"TurnController.handle {statistics.median(case.handle_us):.0f} µs; main-thread "
            f"CPU time over the same span p50 {statistics.median(case.cpu):.0f} µs, p99 "
            f"{_percentile(case.cpu, 99):.0f} µs."
        )
    iterations = [n for case in cases for n in case.iterations]
    worst = max(iterations)
    rows.append(
        Row(
            "event-loop iterations from emit to lever (all samples)",
            iterations,
            "extra",
            ratios=f"{len(iterations)} samples",
            target=verdict(
                worst <= EXTRA_ITERATIONS_TARGET, f"{EXTRA_ITERATIONS_TARGET} extra; max {worst:g}"
            ),
        )
    )
    samples = len(cases[0].latencies)
    return Section(
        "Reaction: LiveKit event → lever",
        rows,
        [
            "Reaction: a started SimulatedCall (real AgentSession, silent callee, silero VAD "
            "running in its executor thread) with the adapter attached; each sample restores "
            "the controller to the state, emits a real LiveKit event with session.emit() and "
            "takes perf_counter from just before the emit to the entry of the effect's lever "
            "(a shim around its entry in the adapter's lever table). "
            f"{samples} samples per case ({config.rounds} rounds × {per_round}, cases "
            "interleaved, after a discarded warm-up round), "
            "collector paused; the figure is the p50, p99 and max are over all samples. "
            "Back-to-back: the next emit right after the last (hot caches); paced: the loop "
            "idles 2 ms before each emit, as between the events of a call. Loop iterations: a "
            "call_soon ticker armed just before the emit, re-armed until the lever runs; its "
            "count at the lever minus its count at the emit.",
            *notes,
        ],
    )


# -- 2. live call CPU --------------------------------------------------------------------


@dataclass
class _CallFigures:
    cpu_s: float
    wall_s: float
    controller_cpu_s: float = 0.0
    handled: int = 0
    levers: int = 0
    levers_in_emit: int = 0
    speech: tuple[str, ...] = ()
    """The start of each assistant message: what the agent said, cut-offs aside."""


async def _one_call(with_controller: bool) -> _CallFigures:
    """The scripted call once; process CPU from building the session to its close."""
    replies = [ANSWER, "Sure, go ahead."]
    if not with_controller:  # the same speech: the LLM says the greeting itself
        replies.insert(0, GREETING)
    adapters: list[TurnAdapter] = []
    controller_cpu = 0.0
    handled = levers = levers_in_emit = 0
    emitting = 0
    depth = 0

    def instrument(session: AgentSession) -> None:
        nonlocal emitting
        emit = session.emit

        def counting_emit(name: str, *args: Any) -> None:
            nonlocal emitting
            emitting += 1
            try:
                emit(name, *args)
            finally:
                emitting -= 1

        session.emit = counting_emit  # type: ignore[method-assign]
        controller = TurnController(POLICY)
        handle = controller.handle

        def timed_handle(event: Any) -> tuple[fx.Effect, ...]:
            nonlocal controller_cpu, handled, depth
            depth += 1
            start = time.thread_time()
            try:
                return handle(event)
            finally:
                depth -= 1
                if not depth:
                    controller_cpu += time.thread_time() - start
                handled += 1

        controller.handle = timed_handle  # type: ignore[method-assign]
        adapter = attach(session, controller)
        adapters.append(adapter)
        shims.enter_context(lever_shim(lever_table(adapter), timed_lever))

    def timed_lever(kind: type[fx.Effect], lever: Lever) -> Any:
        def timed(port: LeverPort, effect: fx.Effect, site: Site) -> None:
            nonlocal controller_cpu, levers, levers_in_emit, depth
            levers += 1
            levers_in_emit += emitting > 0
            depth += 1
            start = time.thread_time()
            try:
                lever(port, effect, site)
            finally:
                depth -= 1
                if not depth:
                    controller_cpu += time.thread_time() - start

        return timed

    with contextlib.ExitStack() as shims:  # the lever shims are undone on the way out
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        call = SimulatedCall(
            CallScript(list(LINES)),
            agent=TurnAgent(instructions="You confirm dental appointments."),
            llm=ScriptedLLM(replies),
            before_start=instrument if with_controller else None,
        )
        async with call:
            if adapters:
                adapters[0].dispatch(CallAnswered(at=adapters[0].now()))
            await call.sleep_until(HANG_UP_AT)
            if adapters:
                adapters[0].dispatch(CallEnded(at=adapters[0].now(), reason="hang_up"))
            speech = tuple(
                (message.text_content or "")[:16] for message in call.messages("assistant")
            )
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return _CallFigures(cpu, wall, controller_cpu, handled, levers, int(levers_in_emit), speech)


async def _warm_up() -> None:
    """Start and close one session: first-use costs stay out of the measured calls."""
    async with SimulatedCall(CallScript([]), agent=TurnAgent(instructions="warm-up")) as call:
        await call.sleep_until(0.3)


def live_call_cpu(config: Config) -> Section:
    load_silero_vad()
    runs = 1 if config.quick else 3
    asyncio.run(_warm_up())
    without: list[_CallFigures] = []
    with_: list[_CallFigures] = []
    for _ in range(runs):  # alternating, so a burst of load hits both variants alike
        without.append(asyncio.run(_one_call(with_controller=False)))
        with_.append(asyncio.run(_one_call(with_controller=True)))
    base = Row("process CPU, call without controller", [f.cpu_s for f in without], "s")
    attached = Row("process CPU, call with controller attached", [f.cpu_s for f in with_], "s")
    base.ratios = "1.00× without"
    attached.ratios = (
        f"{ratio(attached.times(base))} without; {attached.minus(base) * 1000:+.0f} ms"
    )
    own = Row(
        "controller CPU: handle + levers (thread time)",
        [f.controller_cpu_s * 1000 for f in with_],
        "ms",
    )
    per_event = statistics.median(f.controller_cpu_s / f.handled * 1e6 for f in with_)
    own.ratios = (
        f"{statistics.median(f.controller_cpu_s / f.cpu_s for f in with_):.2%} of process CPU; "
        f"{per_event:.0f} µs/event"
    )
    share = Row(
        "controller share of one core over the call",
        [f.controller_cpu_s / f.wall_s * 100 for f in with_],
        "%",
    )
    worst = max(share.samples)
    share.target = verdict(
        worst <= CPU_SHARE_TARGET,
        f"≤ {CPU_SHARE_TARGET:g} %; worst run {worst:.3f} %",
    )
    process_share = Row(
        "process share of one core, with controller",
        [f.cpu_s / f.wall_s * 100 for f in with_],
        "%",
    )
    process_share.ratios = (
        f"without: {statistics.median(f.cpu_s / f.wall_s * 100 for f in without):.1f} %"
    )
    sample = with_[-1]
    spoken = {f.speech for f in (*without, *with_)}
    said = (
        "checked: " + " / ".join(f"{text}…" for text in sample.speech)
        if len(spoken) == 1
        else "NOT in every run: " + "; ".join(" / ".join(s) for s in sorted(spoken))
    )
    return Section(
        "Live call CPU (simulated call, ~11 s)",
        [base, attached, own, share, process_share],
        [
            f"Live call: a SimulatedCall (real AgentSession: silero VAD on paced 20 ms audio, "
            f'scripted LLM/STT/TTS) of {HANG_UP_AT:g} s: "Hello?" at 0.3 s, the locked '
            f'greeting, a question at 4.4 s, the answer, "Wait, stop" at 9.6 s cutting it '
            f"short, hang-up at {HANG_UP_AT:g} s; without the controller the LLM says the "
            f"greeting, so the agent says the same things "
            f"({said}). {runs} runs per "
            "variant, alternating, after a discarded warm-up session; figures are medians. "
            "Process CPU is time.process_time() (all threads) from building the session to its "
            "close; the controller's CPU is time.thread_time() inside TurnController.handle "
            "and the levers (wrapped), over the call's wall time "
            f"(median {statistics.median(f.wall_s for f in with_):.1f} s).",
            f"Per call the controller took {sample.handled} events and ran {sample.levers} "
            f"levers; {sample.levers_in_emit} of them inside the LiveKit emit that caused "
            "them, the rest in the callback of a timer, a speech's done callback, the "
            "TurnAgent hook or the hang-up dispatched by the script (all synchronous in "
            "that callback).",
        ],
    )


SECTIONS = [reaction, live_call_cpu]
"""Run in this order by ``python -m benchmarks`` (after bench_core)."""
