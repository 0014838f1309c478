"""What the realtime model says once turnfsm ended the call, on the real
``openai.realtime`` plugin against `RealtimeTestServer` (fuzz realtime seed 1195).

turnfsm hangs up (here at ``max_call_duration``; by default ``session.shutdown()``), but
the session closes only once its tool step is done: meanwhile the model still hears the
caller and answers. LiveKit skips that reply's generation (its scheduling has stopped),
yet keeps the model's message in the agent's ``chat_ctx``, which applications keep after
the call (a summary of it, say): words nobody heard.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from livekit.agents import llm

from turnfsm import TurnPolicy

from support.fidelity import pinned_fidelity
from support.realtime_calls import Call, LookupAgent, looks_up_once, served_call

QUESTION = "What time do you open tomorrow?"
SECOND = "Is there parking near the office?"
AFTER_THE_END = "Open on Saturday?"
UNHEARD = "Yes, until noon."


@pytest.fixture
async def call(request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    async with served_call(pinned_fidelity(request)) as test_call:
        yield test_call


def _messages(context: llm.ChatContext) -> list[tuple[str, str]]:
    return [
        (item.role, item.text_content or "")
        for item in context.messages()
        if item.role in ("user", "assistant")
    ]


async def test_what_the_model_says_after_the_call_ended_is_in_no_context(call: Call) -> None:
    agent = call.agent = LookupAgent()
    server = call.server
    server.script.policy = looks_up_once(
        {QUESTION: 3.0, SECOND: 3.0}, lambda turn: UNHEARD if turn == AFTER_THE_END else "Okay."
    )
    for transcript in (QUESTION, SECOND, AFTER_THE_END):
        server.script.push_user_transcript(transcript)
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_call_duration=2.5)
    session, _, controller = await call.start(policy)
    closed = asyncio.Event()
    session.on("close", lambda _: closed.set())
    loop = asyncio.get_running_loop()

    call.microphone.speak(1.0)  # its reply looks it up, for 3 s
    while not controller.is_ended:  # the longest call ends during the lookup
        await asyncio.sleep(0.01)
    # turnfsm hung up: the session stops that reply (its lookup runs on), and meanwhile the
    # caller, still there, asks a question that the model looks up too
    call.microphone.speak(0.5)
    while len(agent.lookups) < 2:
        await asyncio.sleep(0.01)
    while loop.time() < agent.lookups[0] + 3.1:  # the first lookup is done: LiveKit stops
        await asyncio.sleep(0.01)  # its scheduling, and waits out the second lookup
    call.microphone.speak(0.5)  # the model answers this one: LiveKit skips the reply
    answer = await server.wait_for_event(
        "response.done",
        direction="sent",
        predicate=lambda event: "noon" in str(event.payload),
        timeout=10.0,
    )
    await asyncio.wait_for(closed.wait(), timeout=10.0)

    assert answer.payload["response"]["status"] == "completed"
    drained_at = agent.lookups[0] + 3.0
    late = [s for s in call.speaker.segments if (s.started_at or 0.0) >= drained_at]
    assert late == []  # nothing of the answer played
    history = _messages(session.history)
    context = _messages(session.current_agent.chat_ctx)
    assert ("assistant", UNHEARD) not in history
    assert ("assistant", UNHEARD) not in context
    assert [m for m in context if m[0] == "assistant"] == [
        m for m in history if m[0] == "assistant"
    ]
    # and the model's conversation lost it too
    deleted = {e.payload["item_id"] for e in server.events_of_type("conversation.item.delete")}
    said = [item["id"] for item in answer.payload["response"]["output"]]
    assert said
    assert set(said) <= deleted
