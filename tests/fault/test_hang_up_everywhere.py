"""Issue 6.2: a hang-up in every state leaves nothing behind.

The states come from :class:`~turnfsm.machine.TurnMachine` itself, so a new state is
covered (and fails here until it gets a driver) without editing the parameter list. For
each state a real call is driven into it, then the call ends one of two ways:

* ``call_ended``: ``CallEnded`` is dispatched (the SIP status said ``hangup``); the
  ``EndCall`` lever shuts the session down. Policy: greeting ``keep_listening``.
* ``session_close``: ``session.aclose()`` (the room went away); the ``close`` event ends
  the call. Policy: greeting ``mute_input`` and ``mute_input_during_tools``, so the input
  gate is shut in ``greeting`` and ``tool_loop`` when the call ends.

Afterwards: the trace ends in ``ended`` (in ``ended`` the hang-up is a no-op), no adapter
timer is left, the gate is open, turn detection and the discard setting are restored, no
task created by turnfsm code is pending, and the adapter is detached from the session.
All 18 calls run concurrently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from faultcalls import (
    FaultCall,
    LogCapture,
    TaskLedger,
    fault_call,
    outbound,
    result_of,
    run_all,
    run_in_new_loop,
)
from livekit.agents import function_tool

from turnfsm import TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent, adapter_for
from turnfsm.adapters.sim import ScriptedLLM, ScriptedReply, ScriptedToolCall
from turnfsm.context import TurnContext
from turnfsm.machine import STATES

HOW = ("call_ended", "session_close")
LONG_REPLY = (
    "Sure, let me tell you everything about your appointment tomorrow morning, "
    "the address, the parking, and what to bring with you."
)


class SlowToolAgent(TurnAgent):
    def __init__(self) -> None:
        super().__init__(instructions="You confirm appointments.")

    @function_tool
    async def slow_lookup(self) -> str:
        """Look up the appointment (slowly)."""
        await asyncio.sleep(2.0)
        return "Tomorrow at nine."


def replies(request: Any) -> ScriptedReply | str:
    last = request.chat_ctx.items[-1] if request.chat_ctx.items else None
    if last is not None and last.type == "function_call_output":
        return "Tomorrow at nine."
    text = request.last_user_text or ""
    if text.startswith("What time"):
        return ScriptedReply(tool_calls=(ScriptedToolCall("slow_lookup"),))
    if text.startswith("Yes"):
        return LONG_REPLY
    return "Okay."


async def to_listening(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_state("listening", timeout=12)


async def drive_start(fc: FaultCall) -> None:
    # A call is in start until it goes live: an inbound one until its session starts,
    # which a simulated call has done when it is handed over. Put the call back there, as
    # for a caller who hangs up while the agent joins: an inbound call without a greeting
    # (listening, no timer, no lever run yet), so that restore() finds it a call can be in.
    await fc.wait_state("listening", timeout=5)
    fc.controller.restore("start", TurnContext())
    await asyncio.sleep(0.2)


async def drive_ringing(fc: FaultCall) -> None:
    await asyncio.sleep(0.2)  # never answered


async def drive_awaiting_user(fc: FaultCall) -> None:
    await fc.wait_state("awaiting_user", timeout=5)
    await asyncio.sleep(0.3)  # answered, the callee is silent


async def drive_awaiting_agent(fc: FaultCall) -> None:
    await fc.wait_state("awaiting_agent", timeout=5)
    await asyncio.sleep(0.3)  # the agent has not greeted (its on_enter says nothing)


async def drive_greeting(fc: FaultCall) -> None:
    fc.call.audio_input.say_now("hello")
    await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=12)


async def drive_listening(fc: FaultCall) -> None:
    await to_listening(fc)
    await asyncio.sleep(0.2)


async def drive_speaking(fc: FaultCall) -> None:
    await to_listening(fc)
    fc.call.audio_input.say_now("yes")
    mark = len(fc.steps)
    await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=12, after=mark)
    await asyncio.sleep(0.5)  # mid-reply


async def drive_tool_loop(fc: FaultCall) -> None:
    await to_listening(fc)
    fc.call.audio_input.say_now("question")
    await fc.wait_state("tool_loop", timeout=12)
    await asyncio.sleep(0.3)  # mid-tool


async def drive_ended(fc: FaultCall) -> None:
    await drive_listening(fc)
    fc.adapter.dispatch(ev.CallEnded(at=fc.adapter.now(), reason="first_hang_up"))


@dataclass(frozen=True)
class Driver:
    drive: Callable[[FaultCall], Awaitable[None]]
    options: dict[str, Any] = field(default_factory=dict)
    answer: bool = True
    greets_in_own_words: bool = False
    """An inbound call where the agent greets in its own words (else outbound)."""


DRIVERS: dict[str, Driver] = {
    "start": Driver(
        drive_start, {"direction": "inbound", "first_speaker": "user", "greeting": None}
    ),
    "ringing": Driver(drive_ringing, answer=False),
    "awaiting_user": Driver(drive_awaiting_user),
    "awaiting_agent": Driver(drive_awaiting_agent, answer=False, greets_in_own_words=True),
    "greeting": Driver(drive_greeting, {"greeting": "Hi, this is Ada from Acme Dental."}),
    "listening": Driver(drive_listening, {"idle_timeout": 30.0}),
    "speaking": Driver(drive_speaking, {"max_call_duration": 60.0}),
    "tool_loop": Driver(drive_tool_loop, {"max_call_duration": 60.0}),
    "ended": Driver(drive_ended),
}


def policy_for(state: str, how: str) -> TurnPolicy:
    options = dict(DRIVERS[state].options)
    if how == "session_close":
        options.update(greeting_lock="mute_input", mute_input_during_tools=True)
    if DRIVERS[state].greets_in_own_words:
        return TurnPolicy(direction="inbound", **options)
    return outbound(**options)


@dataclass
class Outcome:
    fault: FaultCall
    state_at_hang_up: str
    gate_muted_at_hang_up: bool
    steps_before_hang_up: int
    released: list[str]
    timers: list[str]
    pending_tasks: list[str]
    tracked: int
    detached: bool

    def describe(self) -> str:
        return self.fault.describe()


async def hang_up_in(state: str, how: str, ledger: TaskLedger) -> Outcome:
    driver = DRIVERS.get(state)
    if driver is None:
        raise LookupError(f"no driver reaches the new state {state!r}: add one to DRIVERS")
    policy = policy_for(state, how)
    async with fault_call(
        policy,
        name=f"{state}-{how}",
        agent=SlowToolAgent(),
        llm=ScriptedLLM(replies),
        answer=driver.answer,
    ) as fc:
        await driver.drive(fc)
        state_at_hang_up = fc.state
        gate = fc.adapter.gate
        muted = gate is not None and gate.muted
        steps = len(fc.steps)
        if how == "call_ended":
            fc.adapter.dispatch(ev.CallEnded(at=fc.adapter.now(), reason="hangup"))
        else:
            await fc.session.aclose()
        await fc.wait_detached(timeout=8)
    await asyncio.sleep(0.3)  # let callbacks and short tasks of the closed session finish
    return Outcome(
        fault=fc,
        state_at_hang_up=state_at_hang_up,
        gate_muted_at_hang_up=muted,
        steps_before_hang_up=steps,
        released=fc.released(),
        timers=sorted(fc.adapter.port.timers),
        pending_tasks=[repr(task) for task in ledger.pending(fc.adapter)],
        tracked=len(fc.adapter.dispatcher._tasks),
        detached=adapter_for(fc.session) is None and not fc.adapter._handlers,
    )


@dataclass
class Run:
    results: dict[str, Any]
    logs: LogCapture
    leftover_tasks: list[str]


@pytest.fixture(scope="module")
def run() -> Run:
    ledger = TaskLedger()

    async def main() -> tuple[dict[str, Any], list[str]]:
        ledger.install(asyncio.get_running_loop())
        scenarios = {
            f"{state}-{how}": (lambda state=state, how=how: hang_up_in(state, how, ledger))
            for state in STATES
            for how in HOW
        }
        results = await run_all(scenarios)
        return results, [repr(task) for task in ledger.pending()]

    with LogCapture() as logs:
        results, leftovers = run_in_new_loop(main)
    return Run(results, logs, leftovers)


def test_every_state_has_a_driver() -> None:
    assert set(DRIVERS) == set(STATES)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("state", STATES)
def test_hang_up_leaves_nothing_behind(run: Run, state: str, how: str) -> None:
    outcome: Outcome = result_of(run.results, f"{state}-{how}")
    fc = outcome.fault
    assert outcome.state_at_hang_up == state, outcome.describe()
    if how == "session_close" and state in ("greeting", "tool_loop"):
        assert outcome.gate_muted_at_hang_up, "the scenario should end a muted call"
    assert fc.steps[-1].after == "ended", outcome.describe()
    if state == "ended":
        # the second hang-up changed nothing: no effect once the call had ended
        after_end = [s for s in fc.steps if s.before == "ended"]
        assert all(s.after == "ended" and s.effects == () for s in after_end)
        assert fc.steps[outcome.steps_before_hang_up - 1].after == "ended"
    else:
        ends = [s for s in fc.steps if s.after == "ended" and s.before != "ended"]
        assert [s.event.name for s in ends] == ["call_ended"], outcome.describe()
    assert outcome.timers == []
    assert outcome.released == [], outcome.describe()
    assert outcome.pending_tasks == []
    assert outcome.tracked == 0
    assert outcome.detached


def test_no_task_of_ours_is_left_and_nothing_failed(run: Run) -> None:
    assert run.leftover_tasks == []
    problems = [r.getMessage() for r in run.logs.at_least(logging.WARNING)]
    assert problems == []
    assert run.logs.escapes == []
