"""Issue 9, point 5: every outcome check fires when a lever is broken.

Each call breaks one or two levers of its own adapter (``adapter.levers``: the machine
still emits the right effects, LiveKit no longer gets them), runs under LiveKit's default
turn handling, and checks that the outcome monitor saw what the session did:

=====  ======================================================================  ===========
check  broken lever(s) and what the session then does                          call
=====  ======================================================================  ===========
O1     ``interrupt`` does nothing: ``say`` from ``on_enter`` plays before the   outbound
       callee said anything
O2     ``lock_speech`` and ``hold_user_turns`` do nothing: the callee's         outbound,
       overlap interrupts the greeting                                          keep_listening
O3     ``unmute_input`` discards the held audio: only the tail of the overlap   outbound,
       is answered                                                              mute_input
O4     ``drop_unspoken_text`` does nothing: an interrupted reply keeps its      inbound
       unheard words
O5     ``cancel_tool_reply`` does nothing: LiveKit runs a tool round past the   inbound
       cap
O6     ``unmute_input`` does nothing: the input stays muted after the greeting  outbound,
                                                                                mute_input
O7     ``say`` forgets to report its speech's end: the machine waits in         inbound,
       ``speaking`` after the idle re-prompt played (no second re-prompt)       idle_timeout
=====  ======================================================================  ===========

The monitors run as in production (not strict): each check that fired logged exactly one
warning naming it, however often it fired. One more call runs strict and sees the breach
raised. The healthy counterpart of every case is the rest of the integration suite, which
runs strict: no check fires there.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any

import pytest
from livekit.agents import function_tool
from turncalls import GREETING, TurnCall, run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent, adapter_for
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

LIVEKIT_DEFAULTS: dict[str, Any] = {"settings": "livekit-defaults"}
"""Every call runs under LiveKit's default turn handling, with a transcript synchronizer:
each check must fire because of the broken lever, the settings alone make none fire
(the monitor is strict in every other integration test, under both settings rows)."""
LONG_REPLY = (
    "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
    "at ten, please let us know if that time still works for you."
)
HELLO_AT = 2.0


def _breaches(tc: TurnCall) -> dict[str, int]:
    """The monitor's counts, checked against the call's trace: each breach is traced as an
    ``OutcomeBreached`` event (issue 22: the report lists the calls that broke one)."""
    counts = dict(tc.adapter.outcomes.counts)
    assert tc.controller.trace is not None
    traced = collections.Counter(
        step.event.check
        for step in tc.controller.trace
        if isinstance(step.event, ev.OutcomeBreached)
    )
    assert traced == counts, tc.describe()
    return counts


def _does_nothing(port: LeverPort, effect: fx.Effect, site: Site) -> None:
    """A lever that returns without touching LiveKit."""


def _unmute_discarding_held_audio(port: LeverPort, effect: fx.UnmuteInput, site: Site) -> None:
    port.require_gate().unmute(replay_held_audio=False)


def _say_forgetting_its_end(port: LeverPort, effect: fx.Say, site: Site) -> None:
    """``session.say``, but the machine never hears its speech's end."""
    handle = port.session.say(effect.text)
    adapter = adapter_for(port.session)
    assert adapter is not None
    handle.remove_done_callback(adapter._on_speech_done)  # registered on speech_created


def _break(tc: TurnCall, levers: dict[type[fx.Effect], Callable[..., None]]) -> None:
    tc.adapter.outcomes.strict = False
    tc.adapter.levers.update(levers)


def _outbound(**options: Any) -> TurnPolicy:
    return TurnPolicy(direction="outbound", greeting=GREETING, **options)


async def _greeting_then_overlap(tc: TurnCall, overlap_after: float) -> None:
    """The callee talks over the greeting from ``overlap_after`` s into it; wait until the
    call is quiet again."""
    call = tc.call
    greeting = await wait_segment(call, 0, timeout=HELLO_AT + 4)
    await call.sleep_until(tc.segment_start(greeting) + overlap_after)
    call.audio_input.say_now("long_overlap")
    await call.sleep_until(call.now() + LINES["long_overlap"].duration + 5)


class EagerAgent(TurnAgent):
    """Says hello on its own as soon as it enters (LiveKit's ``on_enter`` pattern)."""

    async def on_enter(self) -> None:
        await asyncio.sleep(0.5)  # the test breaks the lever first
        self.session.say("Hello, hello, can you hear me? This is Ada from Acme.")


async def _o1_audio_before_greeting() -> dict[str, int]:
    script = CallScript([UserLine(HELLO_AT, "hello")])
    agent = EagerAgent(instructions="You are on a call.")
    async with turn_call(_outbound(), script, agent=agent, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.Interrupt: _does_nothing})
        await tc.call.sleep_until(HELLO_AT)
        context = tc.describe()
        first = tc.call.audio_output.segments[0]
        assert first.started_at is not None, context
        assert tc.segment_start(first) < HELLO_AT, context
        return _breaches(tc)


async def _o2_greeting_cut() -> dict[str, int]:
    script = CallScript([UserLine(HELLO_AT, "hello")])
    # on the turn hook's reply (greet_on="end_of_turn"), locked by LockSpeech: a greeting
    # started on the final transcript is created locked
    policy = _outbound(greeting_lock="keep_listening", greet_on="end_of_turn")
    async with turn_call(policy, script, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.LockSpeech: _does_nothing, fx.HoldUserTurns: _does_nothing})
        await _greeting_then_overlap(tc, overlap_after=1.0)
        greeting = tc.call.audio_output.segments[0]
        assert greeting.interrupted, tc.describe()
        return _breaches(tc)


async def _o3_tail_answered() -> dict[str, int]:
    script = CallScript([UserLine(HELLO_AT, "hello")])
    policy = _outbound(greeting_lock="mute_input", greeting_overlap="answer_whole")
    llm = ScriptedLLM(["Sure, I will call you back later."])
    async with turn_call(policy, script, llm=llm, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.UnmuteInput: _unmute_discarding_held_audio})
        await _greeting_then_overlap(tc, overlap_after=3.0)
        context = tc.describe()
        answered = [r.last_user_text for r in llm.requests]
        assert answered, context
        assert answered[0] != LINES["long_overlap"].text, context  # only a tail of it
        return _breaches(tc)


async def _o4_unheard_words_kept() -> dict[str, int]:
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    question = LINES["question"].text
    llm = ScriptedLLM(
        lambda request: LONG_REPLY if request.last_user_text == question else "Okay.",
        chars_per_second=1000,
    )
    script = CallScript([UserLine(0.3, "question")])
    async with turn_call(policy, script, llm=llm, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.DropUnspokenText: _does_nothing})
        call = tc.call
        reply = await wait_segment(call, 0, timeout=LINES["question"].duration + 4)
        await call.sleep_until(tc.segment_start(reply) + 1.0)
        call.audio_input.say_now("stop")
        await call.sleep_until(call.now() + LINES["stop"].duration + 4)
        assert call.audio_output.segments[0].interrupted, tc.describe()
        return _breaches(tc)


class LookupAgent(TurnAgent):
    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        return "Tuesday at ten."


async def _o5_round_past_cap() -> dict[str, int]:
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=2)
    llm = ScriptedLLM(["I could not find it."], always_call_tool="lookup")
    script = CallScript([UserLine(0.3, "question")])
    agent = LookupAgent(instructions="Look things up.")
    async with turn_call(policy, script, agent=agent, llm=llm, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.CancelToolReply: _does_nothing})
        rounds = tc.call.events_named
        await tc.call.wait_until(lambda: len(rounds("function_tools_executed")) > 2, timeout=12)
        return _breaches(tc)


async def _o6_left_muted(strict: bool = False) -> dict[str, int]:
    script = CallScript([UserLine(HELLO_AT, "hello")])
    policy = _outbound(greeting_lock="mute_input")
    async with turn_call(policy, script, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.UnmuteInput: _does_nothing})
        tc.adapter.outcomes.strict = strict
        await wait_segment(tc.call, 0, timeout=HELLO_AT + 10, finished=True)
        await tc.call.sleep_until(tc.call.now() + 0.5)
        gate = tc.adapter.gate
        assert gate is not None
        assert gate.muted, tc.describe()
        assert tc.controller.state == "listening", tc.describe()
        return _breaches(tc)


async def _o7_speech_end_never_reported(strict: bool = False) -> dict[str, int]:
    policy = TurnPolicy(direction="inbound", first_speaker="user", idle_timeout=2.0)
    llm = ScriptedLLM(["We open at nine."])
    script = CallScript([UserLine(0.3, "question")])
    async with turn_call(policy, script, llm=llm, **LIVEKIT_DEFAULTS) as tc:
        _break(tc, {fx.Say: _say_forgetting_its_end})
        tc.adapter.outcomes.strict = strict
        call = tc.call
        await wait_segment(call, 1, timeout=LINES["question"].duration + 8, finished=True)
        await call.sleep_until(call.now() + 4.0)  # a second re-prompt would come after 2 s
        context = tc.describe()
        # the re-prompt rendered as the call started; this lever says it with the live TTS
        assert call.tts.texts == [policy.idle_message, "We open at nine.", policy.idle_message], (
            context
        )
        assert tc.controller.state == "speaking", context  # waiting for the re-prompt's end
        assert call.session.agent_state == "listening", context
        (breach,) = tc.adapter.outcomes.agreement_breaches  # one, however long it lasts
        assert "speaking while LiveKit has no speech nor tool step" in str(breach), context
        assert "at quiet" in str(breach), context
        return dict(tc.adapter.outcomes.counts)


CASES = {
    "O1": _o1_audio_before_greeting,
    "O2": _o2_greeting_cut,
    "O3": _o3_tail_answered,
    "O4": _o4_unheard_words_kept,
    "O5": _o5_round_past_cap,
    "O6": _o6_left_muted,
    "O7": _o7_speech_end_never_reported,
}


async def test_each_outcome_check_fires(caplog: pytest.LogCaptureFixture) -> None:
    counts: dict[str, dict[str, int]] = {}

    async def run(check: str) -> None:
        counts[check] = await CASES[check]()
        assert counts[check].get(check, 0) >= 1, f"{check} did not fire: {counts[check]}"

    await run_scenarios({check: run(check) for check in CASES})
    warnings = [
        r.getMessage()
        for r in caplog.get_records("call")
        if r.levelno >= logging.WARNING and r.name.startswith("turnfsm")
    ]
    for check in CASES:
        fired_in = sum(1 for call in counts.values() if call.get(check))
        logged = [m for m in warnings if m.startswith(f"turnfsm: outcome check {check} ")]
        assert len(logged) == fired_in, (check, warnings)
    # O1's agent speaks in on_enter before the callee: that is reported too, once
    refused = [m for m in warnings if m.startswith("turnfsm: EagerAgent.on_enter called")]
    assert len(refused) == 1, warnings
    unexpected = [
        m for m in warnings if not m.startswith("turnfsm: outcome check ") and m not in refused
    ]
    assert unexpected == [], unexpected
    caplog.clear()  # the warnings this test provoked are not failures of the adapter


@pytest.mark.parametrize(("check", "name"), [("O6", "input_released"), ("O7", "state_agrees")])
async def test_strict_monitor_raises(
    check: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    strict_cases = {"O6": _o6_left_muted, "O7": _o7_speech_end_never_reported}
    counts = await strict_cases[check](strict=True)
    assert counts.get(check, 0) >= 1, counts
    raised = [
        r.getMessage()
        for r in caplog.get_records("call")
        if "OutcomeBreach" in r.getMessage() and f"{check} {name}" in r.getMessage()
    ]
    assert raised, [r.getMessage() for r in caplog.get_records("call")]
    caplog.clear()
