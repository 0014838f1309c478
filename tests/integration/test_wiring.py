"""Issue 20, point 4: no wiring mistake passes silently, and LiveKit's defaults just work.

Each hole as a new user met it, on a real session:

* ``end_call`` given an async function (``ctx.api.room.remove_participant(...)`` is one):
  it is awaited, and its failure is the ``end_call`` effect's outcome (a warning says so);
* ``attach`` after ``session.start``, a controller reused for a second call or already
  ended, a second controller on one session, ``end_call`` that is no function, a policy
  passed for a controller: each an ``EmbeddingError`` saying what to change, before
  anything changed;
* the README's shortest policies on a default ``AgentSession(...)``: LiveKit's AEC warm-up
  (3 s of silence to the STT at the agent's first speech) used to be refused by
  ``attach``; the caller's speech over the greeting is held through it instead, and
  answered whole after the greeting.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from livekit.agents import NOT_GIVEN, Agent, AgentSession
from turncalls import GREETING, TurnCall, turn_call

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit import EmbeddingError, TurnAgent, adapter_for, attach
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    ScriptedLLM,
    SimulatedCall,
    UserLine,
)

ANSWER = "We open at nine."
QUESTION = LINES["question"].text
HANGS_UP = TurnPolicy(first_speaker="user", max_call_duration=2.0)
"""The caller speaks first, nothing is said: the call is hung up at 2 s."""


def _answer(request: LLMRequest) -> str:
    return ANSWER if request.last_user_text == QUESTION else "Sorry?"


# -- end_call ------------------------------------------------------------------------------


async def _hung_up(end_call: Any) -> TurnCall:
    """A call hung up by the policy at 2 s, with ``end_call``; closed afterwards."""
    async with turn_call(HANGS_UP, (), agent=Agent(instructions="On a call.")) as tc:
        tc.adapter.port.end_call = end_call  # as attach(end_call=...) sets it
        await tc.call.wait_until(lambda: tc.controller.state == "ended", timeout=4)
        await asyncio.sleep(0.5)  # the hang-up's awaitable runs
    return tc


async def test_an_async_end_call_is_awaited() -> None:
    reasons: list[str] = []

    async def remove_participant(reason: str) -> None:
        await asyncio.sleep(0.1)  # an API call
        reasons.append(reason)

    tc = await _hung_up(remove_participant)
    assert reasons == ["max_duration"]  # run to its end: awaited
    (outcome,) = [s.event for s in tc.events("effect_outcome") if s.event.effect == "end_call"]
    assert (outcome.outcome, outcome.detail) == ("done", "")


async def test_an_async_end_call_that_fails_is_the_effect_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def remove_participant(reason: str) -> None:
        await asyncio.sleep(0.1)
        raise ConnectionError("the room service is unreachable")

    tc = await _hung_up(remove_participant)
    (outcome,) = [s.event for s in tc.events("effect_outcome") if s.event.effect == "end_call"]
    assert (outcome.outcome, outcome.detail) == ("failed", "ConnectionError")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("lever end_call failed" in message for message in warned), warned
    caplog.clear()  # seen: the integration suite's own check would fail on it


# -- attach refuses what it can see ------------------------------------------------------


def _session() -> AgentSession:
    return SimulatedCall().build_session()


async def test_attach_after_start_is_refused() -> None:
    call = SimulatedCall(agent=Agent(instructions="On a call."))
    await call.start()  # started without turnfsm
    with pytest.raises(EmbeddingError, match=r"before session\.start\(\)"):
        attach(call.session, TurnController(TurnPolicy(first_speaker="user")))
    assert adapter_for(call.session) is None  # nothing changed
    await call.aclose()


async def test_a_controller_serves_one_call() -> None:
    controller = TurnController(TurnPolicy(first_speaker="user"))
    attach(_session(), controller)
    other = _session()
    with pytest.raises(EmbeddingError, match="already attached to another session"):
        attach(other, controller)
    assert adapter_for(other) is None
    ended = TurnController(TurnPolicy(first_speaker="user"))
    ended.handle(ev.CallEnded(at=0.0, reason="hangup"))
    with pytest.raises(EmbeddingError, match=r"call has ended.*new TurnController\(policy\)"):
        attach(_session(), ended)


async def test_one_controller_per_session() -> None:
    session = _session()
    attach(session, TurnController(TurnPolicy(first_speaker="user")))
    with pytest.raises(EmbeddingError, match="already attached to this session"):
        attach(session, TurnController(TurnPolicy(first_speaker="user")))


async def test_end_call_must_be_a_function() -> None:
    async def remove_participant() -> None: ...

    hang_up = remove_participant()  # called too early: a coroutine, no function
    with pytest.raises(EmbeddingError, match=r"end_call must be a function.*lambda reason"):
        attach(_session(), TurnController(HANGS_UP), end_call=hang_up)  # type: ignore[arg-type]
    hang_up.close()


async def test_attach_takes_a_controller() -> None:
    with pytest.raises(EmbeddingError, match=r"takes a TurnController, got TurnPolicy"):
        attach(_session(), TurnPolicy(first_speaker="user"))  # type: ignore[arg-type]


# -- the README's shortest policies on a default AgentSession ------------------------------


class WelcomesOnEnter(TurnAgent):
    async def on_enter(self) -> None:
        self.session.say(GREETING)


@pytest.mark.parametrize(
    ("policy", "agent", "script"),
    [
        (
            TurnPolicy(greeting=GREETING),  # inbound, the turnfsm greeting
            TurnAgent(instructions="On a call."),
            [UserLine(1.5, "question")],
        ),
        (TurnPolicy(), WelcomesOnEnter(instructions="On a call."), [UserLine(1.5, "question")]),
        (
            TurnPolicy(direction="outbound", greeting=GREETING),
            TurnAgent(instructions="On a call."),
            [UserLine(0.5, "hello"), UserLine(3.5, "question")],
        ),
    ],
    ids=["inbound", "inbound-own-words", "outbound"],
)
async def test_the_shortest_policies_run_on_a_default_session(
    policy: TurnPolicy, agent: Agent, script: list[UserLine]
) -> None:
    """LiveKit's default warm-up (3 s from the greeting's first audio) would have the STT
    hear silence: the caller's speech over the greeting is held through it and answered
    whole after the greeting."""
    model = ScriptedLLM(_answer)
    async with turn_call(
        policy,
        CallScript(script),
        agent=agent,
        llm=model,
        settings="livekit-defaults",
        session_options={"aec_warmup_duration": NOT_GIVEN},  # LiveKit's default
    ) as tc:
        assert tc.session.options.aec_warmup_duration == 3.0
        greeting = await tc.segment_played(0, timeout=8)
        try:
            await tc.call.wait_until(
                lambda: ANSWER in [m.text_content for m in tc.call.messages("assistant")],
                timeout=12,
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{tc.describe()}") from None
        context = tc.describe()
        assert tc.call.tts.texts[0] == GREETING, context
        assert not greeting.interrupted, context
        assert greeting.played == greeting.pushed, context
        # the question was asked over the greeting, in the warm-up: answered once, whole
        asked = [r.last_user_text for r in model.requests if r.last_user_text != "Hello?"]
        assert asked == [QUESTION], context
        assert tc.adapter.gate is not None, context  # held at a gate through the warm-up
        assert not tc.adapter.gate.muted, context
        assert tc.adapter.outcomes.counts == {}, context


@pytest.mark.parametrize(
    ("policy", "warmup"),
    [
        (TurnPolicy(direction="outbound", greeting=GREETING), 2.0),
        (TurnPolicy(greeting=GREETING), NOT_GIVEN),  # LiveKit's default, on inbound calls
        (TurnPolicy(), 3.0),
    ],
)
async def test_a_warm_up_under_the_greeting_is_held_through_not_refused(
    policy: TurnPolicy, warmup: Any
) -> None:
    adapter = attach(AgentSession(aec_warmup_duration=warmup), TurnController(policy))
    assert adapter.warmup.needs_gate()  # the caller's audio can be held at a gate
