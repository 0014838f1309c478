"""The tool cap with two replies' tool loops at once, on the real ``openai.realtime``
plugin against `RealtimeTestServer` (fuzz realtime seed 1283).

A realtime model answers a turn said during a reply's tool step with a reply of its own,
and goes on with the first reply's tool rounds beside it. LiveKit asks for the reply to a
finished step only once the other reply's speech is done, and asks with a tool choice of
its own ("auto"), which outweighs the session's ``tool_choice="none"`` that turnfsm sets at
the cap: once the first loop reaches the cap, the second one's pending reply would run a
round past it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.sim.realtime import Fidelity, ResponseRequest, ScriptedResponse, ToolCall

from support.fidelity import pinned_fidelity
from support.realtime_calls import Call, LookupAgent, looks_up_once, served_call, wait_finished

QUESTION = "Is there parking near the office?"
SECOND = "And can I bring my dog?"
FINAL = "I checked everything for you."
CPS = 15.0  # the server's speaking rate
FINAL_REPLY = fx.FinalReplyWithoutTools


def _lookups_then_text(seconds: list[float]) -> Any:
    """A model that calls ``lookup`` whenever it may (each call taking the next of
    ``seconds``), and speaks `FINAL` when tools are not allowed."""

    def respond(request: ResponseRequest) -> ScriptedResponse:
        if request.tool_choice == "none" or not seconds:
            return ScriptedResponse(text=FINAL)
        return ScriptedResponse(tool_calls=(ToolCall("lookup", {"seconds": seconds.pop(0)}),))

    return respond


@pytest.fixture
async def call(request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    async with served_call(pinned_fidelity(request)) as test_call:
        yield test_call


@pytest.mark.fidelity(Fidelity(network_latency_ms=300, cancel_latency_ms=600))
async def test_a_second_tool_loop_runs_no_round_past_the_cap(call: Call) -> None:
    agent = call.agent = LookupAgent()
    server = call.server
    server.script.policy = _lookups_then_text([1.0, 0.1, 0.3, 0.3, 0.3, 0.3])
    for transcript in (QUESTION, SECOND):
        server.script.push_user_transcript(transcript)
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=3)
    session, _, controller = await call.start(policy)

    call.microphone.speak(1.0)  # the question: its reply looks it up, for 2 s
    while not agent.lookups:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.4)
    call.microphone.speak(0.4)  # said during the lookup: the model answers it with its own
    second_turn = await server.wait_for_event(
        "conversation.item.done",
        predicate=lambda event: event.payload["item"].get("role") == "user",
        direction="sent",
        count=2,
    )
    final = await call.segment_playing(0)
    await wait_finished(final)
    await asyncio.sleep(2.0)  # nothing else follows

    turn_at = second_turn.timestamp
    in_second_turn = [at for at in agent.lookups if at >= turn_at - 0.01]
    assert len(in_second_turn) == 3, (agent.lookups, turn_at)  # the cap, not one more
    # one reply after the cap, asked without tools, and played whole
    assert len(call.speaker.segments) == 1
    assert call.speaker.segments[0].played == pytest.approx(len(FINAL) / CPS, abs=0.2)
    assert [r.request.tool_choice for r in server.responses if r.reply.text] == ["none"]
    assistant = [m.text_content for m in session.history.messages() if m.role == "assistant"]
    assert assistant == [FINAL]
    assert controller.trace is not None
    finals = [e for step in controller.trace for e in step.effects if isinstance(e, FINAL_REPLY)]
    assert len(finals) == 1
    # the first reply's next round, asked before the cap, was discarded as it came: its
    # call never ran, and neither conversation keeps a call without an output
    outputs = {
        item.call_id for item in session.history.items if item.type == "function_call_output"
    }
    calls = [item.call_id for item in session.history.items if item.type == "function_call"]
    assert set(calls) == outputs
    assert len(calls) == len(agent.lookups) == 4
    summary = [kind for kind, _ in server.conversation_summary()]
    assert summary.count("function_call") == summary.count("function_call_output") == 4


ANSWER = "Yes, on Saturday we open at nine and close at noon, as on every weekday."


@pytest.mark.fidelity(Fidelity(network_latency_ms=100, cancel_latency_ms=150))
async def test_the_answer_is_not_cut_by_the_end_of_an_interrupted_tool_step(call: Call) -> None:
    """Two replies run tools; the caller interrupts the second while the machine is in
    ``speaking`` (the first one's step ended), then asks a question: the interrupted step's
    end must not cancel the answer (fuzz realtime seed 1998)."""
    agent = call.agent = LookupAgent()
    server = call.server
    third = "Open on Saturday?"
    server.script.policy = looks_up_once({QUESTION: 2.5, SECOND: 3.0}, lambda turn: ANSWER)
    for transcript in (QUESTION, SECOND, third):
        server.script.push_user_transcript(transcript)
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=4)
    session, _, controller = await call.start(policy)
    loop = asyncio.get_running_loop()

    call.microphone.speak(1.0)  # the first reply looks it up, for 2.5 s
    while not agent.lookups:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    call.microphone.speak(0.5)  # it is interrupted; the second reply looks up for 3 s
    while len(agent.lookups) < 2:
        await asyncio.sleep(0.01)
    # the first step is over (the machine in speaking); the caller interrupts the second
    # reply and asks, and the model answers just after the second step ended
    while loop.time() < agent.lookups[1] + 3.0 - 1.4:
        await asyncio.sleep(0.01)
    call.microphone.speak(0.8)
    answer = await call.segment_playing(0)
    await wait_finished(answer)
    await asyncio.sleep(1.0)

    assert len(agent.lookups) == 2
    assert len(call.speaker.segments) == 1
    assert not answer.interrupted
    assert answer.played == pytest.approx(len(ANSWER) / CPS, abs=0.2)
    answers = [r for r in server.responses if r.reply.text == ANSWER]
    assert [r.status for r in answers] == ["completed"]
    assistant = [m.text_content for m in session.history.messages() if m.role == "assistant"]
    assert assistant == [ANSWER]
    assert controller.trace is not None
    cancels = [
        e for step in controller.trace for e in step.effects if isinstance(e, fx.CancelToolReply)
    ]
    assert len(cancels) == 2  # both interrupted steps' outputs go unanswered
