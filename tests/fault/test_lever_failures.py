"""Issue 6.2: every LiveKit lever may fail; the call must survive it.

Two kinds of failure, all on real ``AgentSession`` calls:

* **Each lever raising.** For every effect type one call passes through that effect while
  its entry of :data:`~turnfsm.adapters.livekit.levers.LEVERS` raises (our own dispatch
  table, patched to stand for a LiveKit failure). The 16 calls run concurrently, so the
  patched entry raises only for the adapter of its own call and runs the real lever for
  every other call: in each call exactly one lever fails.
* **Real LiveKit failures.** Levers run against a closed session, a failing
  ``agent.update_chat_ctx``, and a session without audio input (``MuteInput`` has no
  gate).
* **A LiveKit refusal.** An interrupt of a locked tool step (``session.interrupt()``
  raises), emitted by a machine that still stops tool steps on the raw VAD start: no
  failure, an ``effect_outcome`` ``refused``; the loop goes on and its result is spoken.

Each lever's outcome reaches the machine as ``effect_outcome`` (done, refused, failed).
In every failure: it is logged once, as a WARNING naming the lever and the state;
the strict controller raised nothing and its trace goes on to ``ended``; the caller's
input is not left muted nor user turns held; and the call goes on: a later user turn
still gets a reply (when the hang-up itself fails, the session stays up until closed).
The calls share one process, so the log records are kept by a handler installed for the
whole run (``LogCapture``, the module-scope stand-in for ``caplog``) and told apart by
the failure each call provokes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from faultcalls import (
    GREETING,
    STT_TURN_HANDLING,
    FaultCall,
    InjectedSTT,
    LogCapture,
    attach_late,
    fault_call,
    outbound,
    result_of,
    run_all,
    run_in_new_loop,
    wait_for,
)
from livekit.agents import AgentSession, RunContext, StopResponse, function_tool, llm

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import LEVERS, TurnAdapter, TurnAgent, adapter_for, attach
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim import (
    PacedAudioOutput,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    ScriptedTTS,
)
from turnfsm.machine import build_machine, chart_states
from turnfsm.rules import TurnRules
from turnfsm.tools.metrics import call_metrics

QUESTION = "What time do you open"
"""The probe: said after the failure, it must still get a reply."""

LONG_REPLY = (
    "Sure, let me tell you everything about your appointment tomorrow morning, "
    "the address, the parking, and what to bring with you."
)


class SimulatedLeverFailure(RuntimeError):
    """Stands for a LiveKit call that raised."""


# -- which lever fails for which call --------------------------------------------------------


class LeverFaults:
    """Replaces every entry of ``LEVERS`` by a wrapper: the wrapper raises for the one
    effect type chosen for a controller's call, and runs the real lever otherwise."""

    def __init__(self) -> None:
        self.target: dict[int, tuple[type[fx.Effect], str]] = {}
        self.raised: collections.Counter[int] = collections.Counter()

    def fail(self, controller: TurnController, effect_type: type[fx.Effect], tag: str) -> None:
        self.target[id(controller)] = (effect_type, tag)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for effect_type, lever in list(LEVERS.items()):
            monkeypatch.setitem(LEVERS, effect_type, self._wrap(effect_type, lever))

    def _wrap(self, effect_type: type[fx.Effect], lever: Any) -> Any:
        def maybe_failing(port: LeverPort, effect: fx.Effect, site: Site) -> None:
            adapter = adapter_for(port.session)
            call = id(adapter.controller) if adapter is not None else 0
            target = self.target.get(call)
            if target is not None and target[0] is effect_type:
                self.raised[call] += 1
                raise SimulatedLeverFailure(f"simulated LiveKit failure [{target[1]}]")
            lever(port, effect, site)

        return maybe_failing


# -- the calls -------------------------------------------------------------------------------


class ToolAgent(TurnAgent):
    """An agent with one quick lookup tool."""

    def __init__(self) -> None:
        super().__init__(instructions="You confirm appointments.")

    @function_tool
    async def lookup(self) -> str:
        """Look up the opening hours."""
        await asyncio.sleep(0.1)
        return "We open at nine."


class LockedToolAgent(TurnAgent):
    """A tool that makes its speech uninterruptible, then takes a while."""

    def __init__(self) -> None:
        super().__init__(instructions="You confirm appointments.")

    @function_tool
    async def check_calendar(self, context: RunContext) -> str:
        """Check the calendar."""
        context.disallow_interruptions()
        await asyncio.sleep(2.0)
        return "Free at nine."


class ContextStoreDown(TurnAgent):
    """An agent whose chat context cannot be updated."""

    async def update_chat_ctx(self, chat_ctx: llm.ChatContext, **kwargs: Any) -> None:
        raise RuntimeError("chat context store unavailable [context-store-down]")


def long_reply_to_yes(request: Any) -> str:
    return LONG_REPLY if (request.last_user_text or "").startswith("Yes") else "Okay."


def lookup_for_the_question(request: Any) -> ScriptedReply | str:
    last = request.chat_ctx.items[-1] if request.chat_ctx.items else None
    if last is not None and last.type == "function_call_output":
        return "We open at nine."
    if (request.last_user_text or "").startswith(QUESTION):
        return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
    return "Okay."


def calendar_llm(request: Any) -> ScriptedReply | str:
    last = request.chat_ctx.items[-1] if request.chat_ctx.items else None
    if last is not None and last.type == "function_call_output":
        return "We open at nine."
    if (request.last_user_text or "").startswith(QUESTION):
        # spoken while the tool runs: the locked speech is LiveKit's current speech
        # (during a tool-only step there is none, and interrupt() has nothing to refuse)
        return ScriptedReply(
            text="Let me check that for you, one moment please.",
            tool_calls=(ScriptedToolCall("check_calendar"),),
        )
    return "Okay."


@dataclass(frozen=True)
class Recipe:
    """A call that passes through some effects, then asks the probe question."""

    policy: TurnPolicy
    drive: Callable[[FaultCall], Awaitable[None]]
    agent: Callable[[], TurnAgent] = lambda: TurnAgent(instructions="You are on a call.")
    llm: Callable[[], ScriptedLLM] = lambda: ScriptedLLM(["Okay."])
    probe: str = QUESTION
    """The user turn after the failure that must get a reply."""


async def ask_probe(fc: FaultCall) -> None:
    """Once the agent listens, the callee asks the probe question; wait for the reply."""
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("question")
    await fc.wait_reply_after(QUESTION, timeout=12)


async def after_hello(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await ask_probe(fc)


async def early_speech_then_hello(fc: FaultCall) -> None:
    fc.session.say("Early words.")  # before the callee spoke: the machine stops it
    await asyncio.sleep(0.3)
    await after_hello(fc)


async def barge_in(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_state("listening", timeout=12)
    mark = len(fc.steps)
    fc.call.audio_input.say_now("yes")
    await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=12, after=mark)
    await asyncio.sleep(1.0)
    fc.call.audio_input.say_now("stop")
    interrupted = await fc.wait_step(
        lambda s: isinstance(s.event, ev.AgentSpeechEnded) and s.event.interrupted, timeout=8
    )
    # the callee's "stop" turn commits (and gets its reply) before the probe
    after = fc.steps.index(interrupted)
    await fc.wait_step(lambda s: s.event.name == "user_turn_committed", timeout=10, after=after)
    await asyncio.sleep(0.3)
    await ask_probe(fc)


async def overlap_in_greeting(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_step(lambda s: any(isinstance(e, fx.LockSpeech) for e in s.effects), timeout=8)
    message = llm.ChatMessage(role="user", content=["Sorry, who is this?"])
    try:  # what LiveKit calls when a turn completes: the TurnAgent hook
        await fc.call.agent.on_user_turn_completed(fc.session.history.copy(), message)
        fc.notes.append("overlap turn: not stopped")
    except StopResponse:
        fc.notes.append("overlap turn: StopResponse")
    await ask_probe(fc)


async def tool_cap_then_probe(fc: FaultCall) -> None:
    """The question runs the tool up to the cap (the failure is there); then "Yes"."""
    fc.call.audio_input.say_now("hello")
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("question")
    await fc.wait_step(lambda s: s.event.name == "tool_step_finished", timeout=12)
    await fc.wait_state("listening", timeout=12)
    await asyncio.sleep(0.5)  # a reply that LiveKit still sends after the tool step
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("yes")
    await fc.wait_reply_after("Yes, that works", timeout=12)


async def idle_then_probe(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_step(lambda s: s.event.name == "idle_timer_expired", timeout=12)
    await asyncio.sleep(0.2)
    await ask_probe(fc)


async def barge_into_locked_tool(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("question")
    await fc.wait_state("tool_loop", timeout=12)
    await asyncio.sleep(0.2)
    fc.call.audio_input.say_now("stop")
    await fc.wait_step(lambda s: any(isinstance(e, fx.Interrupt) for e in s.effects), timeout=8)
    await fc.wait_step(lambda s: s.event.name == "effect_outcome", timeout=8)
    await fc.wait_step(lambda s: s.event.name == "tool_step_finished", timeout=8)
    await fc.wait_state("listening", timeout=12)
    await asyncio.sleep(1.5)  # the callee's "stop" turn settles
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("yes")
    await fc.wait_reply_after("Yes, that works", timeout=12)


class SlowToolAgent(TurnAgent):
    """An agent whose lookup takes long enough for a barge-in into its step."""

    def __init__(self) -> None:
        super().__init__(instructions="You confirm appointments.")

    @function_tool
    async def lookup(self) -> str:
        """Look up the opening hours."""
        await asyncio.sleep(2.5)
        return "We open at nine."


async def barge_into_tool_step_then_probe(fc: FaultCall) -> None:
    """The question runs the slow tool; the caller barges in as it returns (the reply to
    its output is held, then released); then "Yes"."""
    fc.call.audio_input.say_now("hello")
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("question")
    await fc.wait_state("tool_loop", timeout=12)
    await asyncio.sleep(2.0)
    fc.call.audio_input.say_now("stop")
    await fc.wait_step(lambda s: s.event.name == "tool_step_finished", timeout=8)
    await fc.wait_state("listening", timeout=15)
    await asyncio.sleep(1.5)  # the callee's "stop" turn settles
    await fc.wait_state("listening", timeout=12)
    fc.call.audio_input.say_now("yes")
    await fc.wait_reply_after("Yes, that works", timeout=12)


GREETING_HOLD = Recipe(outbound(), after_hello)
GREETING_MUTE = Recipe(outbound(greeting_lock="mute_input"), after_hello)
EARLY_SPEECH = Recipe(outbound(), early_speech_then_hello)
BARGE_IN = Recipe(outbound(), barge_in, llm=lambda: ScriptedLLM(long_reply_to_yes))
GREETING_DROP = Recipe(outbound(greeting_overlap="drop"), after_hello)
OVERLAP_TURN = Recipe(outbound(greeting_overlap="drop"), overlap_in_greeting)
TOOL_CAP = Recipe(
    outbound(max_tool_steps=1),
    tool_cap_then_probe,
    agent=ToolAgent,
    llm=lambda: ScriptedLLM(lookup_for_the_question, default_reply="We open at nine."),
    probe="Yes, that works",
)
IDLE = Recipe(outbound(idle_timeout=1.5, idle_max_reprompts=5), idle_then_probe)
TOOL_BARGE_IN = Recipe(
    outbound(),  # the hold of the tool reply is on by default
    barge_into_tool_step_then_probe,
    agent=SlowToolAgent,
    llm=lambda: ScriptedLLM(lookup_for_the_question, default_reply="We open at nine."),
    probe="Yes, that works",
)

PIPELINE_EFFECTS = tuple(t for t in fx.EFFECT_TYPES if t not in fx.REALTIME_EFFECTS)
"""The effects a pipeline call can emit (a realtime-only one never reaches its levers)."""

RECIPES: dict[type[fx.Effect], Recipe] = {
    fx.StartTimer: GREETING_HOLD,
    fx.CancelTimer: GREETING_HOLD,
    fx.HoldUserTurns: GREETING_HOLD,
    fx.StartGreeting: GREETING_HOLD,
    fx.LockSpeech: GREETING_HOLD,
    fx.ResumeUserTurns: GREETING_HOLD,
    fx.EndCall: GREETING_HOLD,
    fx.MuteInput: GREETING_MUTE,
    fx.UnmuteInput: GREETING_MUTE,
    fx.Interrupt: EARLY_SPEECH,
    fx.DropUnspokenText: BARGE_IN,
    fx.ClearUserTurn: GREETING_DROP,
    fx.RejectUserTurn: OVERLAP_TURN,
    fx.CancelToolReply: TOOL_CAP,
    fx.FinalReplyWithoutTools: TOOL_CAP,
    fx.Say: IDLE,
    fx.HoldToolReply: TOOL_BARGE_IN,
    fx.ReleaseToolReply: TOOL_BARGE_IN,
}
"""For each effect type, a call that passes through it (a test checks none is missing)."""


@dataclass
class Outcome:
    """What one call left behind, checked by the tests after every call has run."""

    fault: FaultCall
    raised: int = 0
    probe_answered: bool = False
    held_at_probe: list[str] = field(default_factory=list)
    released_after: list[str] = field(default_factory=list)
    timers_after: list[str] = field(default_factory=list)
    attached_after_end_call: bool = False
    detached: bool = False
    error: str | None = None

    def describe(self) -> str:
        return (self.error or "") + "\n" + self.fault.describe()


async def run_call(
    name: str, recipe: Recipe, *, controller: TurnController, session_options: Any = None
) -> Outcome:
    async with fault_call(
        recipe.policy,
        name=name,
        controller=controller,
        agent=recipe.agent(),
        llm=recipe.llm(),
        session_options=session_options,
    ) as fc:
        outcome = Outcome(fault=fc)
        try:
            await recipe.drive(fc)
            outcome.probe_answered = True
        except TimeoutError as error:
            outcome.error = f"{name}: {error}"
        await asyncio.sleep(0.3)
        outcome.held_at_probe = [p for p in fc.released() if "muted" in p or "held" in p]
        fc.adapter.dispatch(ev.CallEnded(at=fc.adapter.now(), reason="test_over"))
        await asyncio.sleep(0.05)
        outcome.attached_after_end_call = adapter_for(fc.session) is fc.adapter
    await asyncio.sleep(0.1)
    outcome.detached = adapter_for(fc.session) is None and not fc.adapter._handlers
    outcome.released_after = fc.released()
    outcome.timers_after = sorted(fc.adapter.port.timers)
    return outcome


# -- real LiveKit failures ---------------------------------------------------------------


def stop_tools_on_raw_barge_in(chart: dict[str, Any]) -> None:
    """The machine before issue 9: a tool step is stopped on the raw VAD start with
    ``Interrupt(force=False)``, whatever LiveKit's interruption rules say."""
    states = chart_states(chart)
    chart["user_speech_started"] |= states["tools_open"].to(
        states["tool_loop_interrupted"],
        cond=["runs_a_tool_step", "has_a_tool_speech"],
        on="stop_the_tool_step",
    )


RawBargeInMachine = build_machine(stop_tools_on_raw_barge_in, name="RawBargeInMachine")


class RawBargeInRules(TurnRules):
    def has_a_tool_speech(self) -> bool:
        return self.context.tool_speech_id is not None

    def stop_the_tool_step(self) -> None:
        self.emit(fx.Interrupt(force=False))


async def locked_tool_interrupt(controller: TurnController) -> Outcome:
    recipe = Recipe(
        outbound(),
        barge_into_locked_tool,
        agent=LockedToolAgent,
        llm=lambda: ScriptedLLM(calendar_llm),
    )
    return await run_call("locked_tool", recipe, controller=controller)


async def context_update_fails(controller: TurnController) -> Outcome:
    recipe = Recipe(
        controller.policy,
        barge_in,
        agent=lambda: ContextStoreDown(instructions="You are on a call."),
        llm=lambda: ScriptedLLM(long_reply_to_yes),
    )
    return await run_call("context_store_down", recipe, controller=controller)


@dataclass
class ClosedSessionOutcome:
    late_dispatch_state: str
    fresh: TurnController
    fresh_adapter: TurnAdapter
    released: list[str]


async def levers_on_closed_session() -> ClosedSessionOutcome:
    """Effects executed against a session that is already closed."""
    async with fault_call(outbound(), name="closed") as fc:
        await asyncio.sleep(0.2)
    # the attached adapter detached on close: its later inputs are ignored
    fc.adapter.dispatch(ev.UserTurnCommitted(at=1.0, text="Hello?", item_id="late"))
    # a fresh controller on the closed session: every lever touching it fails (keep_text:
    # the warnings quote LiveKit's error messages, told apart below)
    fresh = TurnController(outbound(), strict=True, keep_text=True)
    adapter = attach_late(fc.session, fresh)
    adapter.dispatch(ev.CallAnswered(at=adapter.now()))  # start_timer: no session needed
    # interrupt(force=True) of a speech before the callee spoke: session.interrupt() fails
    adapter.dispatch(ev.AgentSpeechCreated(at=adapter.now(), speech_id="ghost", source="say"))
    # hold_user_turns, start_greeting: session.say() fails
    adapter.dispatch(ev.UserTurnCommitted(at=adapter.now(), text="Hello?", item_id="after"))
    # resume_user_turns, end_call: shutting down a closed session is a no-op
    adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="test_over"))
    released = [] if adapter.held_turn_settings is None else ["user turns still held"]
    adapter.detach()
    return ClosedSessionOutcome(fc.state, fresh, adapter, released)


@dataclass
class NoInputOutcome:
    controller: TurnController
    adapter: TurnAdapter
    history: list[tuple[str, str]]


async def no_audio_input() -> NoInputOutcome:
    """A session without audio input (the caller's words come from the STT only)."""
    stt = InjectedSTT()
    session = AgentSession(
        llm=ScriptedLLM(lambda r: f"Answer to: {r.last_user_text}", chars_per_second=400),
        stt=stt,
        tts=ScriptedTTS(chars_per_second=60),
        vad=None,
        aec_warmup_duration=None,
        turn_handling=STT_TURN_HANDLING,  # type: ignore[arg-type]
    )
    output = PacedAudioOutput()
    session.output.audio = output
    controller = TurnController(outbound(greeting_lock="mute_input"), strict=True, keep_text=True)
    adapter = attach(session, controller)
    await session.start(TurnAgent(instructions="You are on a call."), record=False)
    try:
        adapter.dispatch(ev.CallAnswered(at=adapter.now()))
        await wait_for(lambda: stt.ready, timeout=5, what="stt stream")
        stt.speak("Hello, no microphone here?")
        await wait_for(lambda: controller.state == "listening", timeout=8, what="greeting done")
        stt.speak("Can you still hear me?")
        await wait_for(
            lambda: any(
                m.role == "assistant" and "Can you still hear me" in (m.text_content or "")
                for m in session.history.items
                if m.type == "message"
            ),
            timeout=8,
            what="reply to the second turn",
        )
        history = [
            (m.role, m.text_content or "") for m in session.history.items if m.type == "message"
        ]
        adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="test_over"))
    finally:
        await session.aclose()
        await output.aclose()
    return NoInputOutcome(controller, adapter, history)


# -- one concurrent run for the whole module -------------------------------------------------


@dataclass
class Run:
    results: dict[str, Any]
    logs: LogCapture
    controllers: dict[str, TurnController]
    faults: LeverFaults


@pytest.fixture(scope="module")
def run() -> Run:
    faults = LeverFaults()
    controllers: dict[str, TurnController] = {}
    scenarios: dict[str, Callable[[], Awaitable[Any]]] = {}
    for effect_type, recipe in RECIPES.items():
        controller = TurnController(recipe.policy, strict=True, keep_text=True)
        faults.fail(controller, effect_type, tag=effect_type.name)
        controllers[effect_type.name] = controller
        scenarios[effect_type.name] = lambda name=effect_type.name, recipe=recipe, c=controller: (
            run_call(name, recipe, controller=c)
        )
    controllers["locked_tool"] = TurnController(
        outbound(),
        strict=True,
        keep_text=True,
        machine_class=RawBargeInMachine,
        rules_class=RawBargeInRules,
    )
    scenarios["locked_tool"] = lambda: locked_tool_interrupt(controllers["locked_tool"])
    controllers["context_store_down"] = TurnController(
        outbound(interrupted_text="drop"), strict=True, keep_text=True
    )
    scenarios["context_store_down"] = lambda: context_update_fails(
        controllers["context_store_down"]
    )
    scenarios["closed_session"] = levers_on_closed_session
    scenarios["no_audio_input"] = no_audio_input
    with pytest.MonkeyPatch.context() as monkeypatch, LogCapture() as logs:
        faults.install(monkeypatch)
        results = run_in_new_loop(lambda: run_all(scenarios))
    return Run(results, logs, controllers, faults)


def warnings_with(run: Run, needle: str) -> list[logging.LogRecord]:
    return [r for r in run.logs.at_least(logging.WARNING) if needle in r.getMessage()]


def test_every_effect_type_has_a_recipe() -> None:
    assert set(LEVERS) == set(fx.EFFECT_TYPES)
    # realtime-only effects: their levers fail in tests/realtime (RealtimeLink)
    assert set(RECIPES) == set(PIPELINE_EFFECTS)


@pytest.mark.parametrize("effect_type", PIPELINE_EFFECTS, ids=lambda t: t.name)
def test_a_raising_lever_is_logged_once_and_the_call_goes_on(
    run: Run, effect_type: type[fx.Effect]
) -> None:
    name = effect_type.name
    outcome: Outcome = result_of(run.results, name)
    fc = outcome.fault
    controller = run.controllers[name]
    assert run.faults.raised[id(controller)] >= 1, f"the call never reached {name}"
    # logged once, as a warning naming the lever and the state
    logged = warnings_with(run, f"[{name}]")
    assert len(logged) == 1, [r.getMessage() for r in logged]
    message = logged[0].getMessage()
    failed_in = next(s for s in fc.steps if any(type(e) is effect_type for e in s.effects))
    assert f"lever {name} failed" in message
    assert f" in {failed_in.before})" in message
    # the machine heard it: the effect's outcome came back as failed, naming the error
    outcomes = [
        s.event
        for s in fc.steps
        if isinstance(s.event, ev.EffectOutcome) and s.event.effect == name
    ]
    failed = [o for o in outcomes if o.outcome == "failed"]
    assert failed, outcome.describe()
    assert failed[0].detail == SimulatedLeverFailure.__name__
    # the controller stayed consistent: the trace went on to the end, no invariant broke
    assert fc.steps.index(failed_in) < len(fc.steps) - 1
    assert fc.steps[-1].after == "ended", outcome.describe()
    # the input was never left muted, nor user turns held
    assert not outcome.held_at_probe, outcome.describe()
    assert not outcome.released_after, outcome.describe()
    assert outcome.timers_after == []
    assert outcome.detached
    # the call went on: the question after the failure got a reply
    if effect_type is fx.EndCall:
        # the hang-up itself failed: the session stayed up until it was closed
        assert outcome.attached_after_end_call
        assert outcome.probe_answered, outcome.describe()
    else:
        assert outcome.probe_answered, outcome.describe()
        assert fc.replied_after(RECIPES[effect_type].probe), outcome.describe()


def test_an_interrupt_livekit_refuses_is_reported_and_the_loop_goes_on(run: Run) -> None:
    """``session.interrupt()`` raises on the locked tool step: a refusal, not a failure.
    The machine hears ``effect_outcome(interrupt, refused)``, lets the loop go on, and the
    tool's result is spoken."""
    outcome: Outcome = result_of(run.results, "locked_tool")
    fc = outcome.fault
    assert warnings_with(run, "does not allow interruptions") == []
    refused = [
        s
        for s in fc.steps
        if isinstance(s.event, ev.EffectOutcome) and s.event.effect == fx.Interrupt.name
    ]
    assert len(refused) == 1, outcome.describe()
    assert refused[0].event.outcome == "refused", outcome.describe()
    assert refused[0].before == "tool_loop", outcome.describe()
    finished = next(s for s in fc.steps if s.event.name == "tool_step_finished")
    assert not any(isinstance(e, fx.CancelToolReply) for e in finished.effects)
    assert ("assistant", "We open at nine.") in fc.history(), outcome.describe()
    assert outcome.probe_answered, outcome.describe()
    assert fc.steps[-1].after == "ended"
    assert not outcome.released_after
    assert outcome.timers_after == []
    assert outcome.detached


def test_a_failing_chat_context_update_is_logged_once_with_its_effect(run: Run) -> None:
    outcome: Outcome = result_of(run.results, "context_store_down")
    fc = outcome.fault
    logged = warnings_with(run, "[context-store-down]")
    assert len(logged) == 1, outcome.describe()
    message = logged[0].getMessage()
    assert "lever drop_unspoken_text failed" in message
    assert "in speaking" in message or "in listening" in message
    # the history lost the unheard reply; the agent's own context could not be updated
    assert LONG_REPLY not in [text for _, text in fc.history()]
    assert outcome.probe_answered, outcome.describe()
    assert fc.steps[-1].after == "ended"
    assert not outcome.released_after
    assert outcome.timers_after == []
    assert outcome.detached


def test_levers_on_a_closed_session_fail_once_each_and_the_machine_ends(run: Run) -> None:
    outcome: ClosedSessionOutcome = result_of(run.results, "closed_session")
    # the adapter that saw the close ignores later inputs (debug log)
    assert outcome.late_dispatch_state == "ended"
    assert any(
        "user_turn_committed after detach ignored" in r.getMessage() for r in run.logs.records
    )
    # the fresh controller's levers hit the closed session
    logged = warnings_with(run, "isn't running")
    # the greeting that failed to start is said again once (locked), which fails too:
    # the machine ends the call rather than stay in a deaf greeting
    assert [r.getMessage().split(" failed")[0] for r in logged] == [
        "turnfsm: lever interrupt",
        "turnfsm: lever start_greeting",
        "turnfsm: lever say",
    ]
    assert outcome.fresh.state == "ended"
    assert outcome.fresh.trace is not None
    assert call_metrics(outcome.fresh.trace).end_reason == "greeting_failed"
    assert outcome.fresh.trace.steps[-1].after == "ended"
    assert outcome.released == []
    assert outcome.fresh_adapter.port.timers == {}


def test_no_audio_input_fails_mute_and_unmute_once_and_the_call_goes_on(run: Run) -> None:
    outcome: NoInputOutcome = result_of(run.results, "no_audio_input")
    logged = warnings_with(run, "no audio input to mute")
    assert sorted(r.getMessage().split(" failed")[0] for r in logged) == [
        "turnfsm: lever mute_input",
        "turnfsm: lever unmute_input",
    ]
    assert all(
        "in awaiting_user)" in r.getMessage() or "in greeting)" in r.getMessage() for r in logged
    )
    assert outcome.adapter.gate is None
    assert outcome.controller.state == "ended"
    assert ("user", "Hello, no microphone here?") in outcome.history
    assert outcome.history[1] == ("assistant", GREETING)
    assert outcome.history[-1][0] == "assistant"


def test_nothing_else_failed(run: Run) -> None:
    """Every warning belongs to a failure provoked above; no controller error at all."""
    expected = [f"[{t.name}]" for t in RECIPES] + [
        "[context-store-down]",
        "isn't running",
        "no audio input to mute",
        # what a failed lever leaves behind, as the outcome monitor reports it
        "turnfsm: outcome check ",
    ]
    unexpected = [
        r.getMessage()
        for r in run.logs.at_least(logging.WARNING)
        if not any(needle in r.getMessage() for needle in expected)
    ]
    assert unexpected == []
    assert run.logs.at_least(logging.ERROR) == []
    assert run.logs.escapes == []
