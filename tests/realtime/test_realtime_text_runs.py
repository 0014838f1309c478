"""Issue 20.5: ``session.run(user_input=...)`` with a realtime model and turnfsm attached.

A realtime model commits a typed turn itself (the plugin adds the user item and asks the
model); turnfsm does not report it as the callee's words. Where the machine needs no first
words (the agent speaks first) the runs are answered as without turnfsm; where it waits for
them (an outbound greeting), a typed run gets no reply, ends all the same, and turnfsm says
why in one warning. The README's "Testing your agent" names what to use instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from livekit.agents import AgentSession
from livekit.plugins import openai

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach

from support.realtime_server import RealtimeScript, RealtimeTestServer


@pytest.fixture
async def text_session() -> AsyncIterator[AgentSession]:
    """A text session (no audio in or out) on the real realtime plugin."""
    async with RealtimeTestServer(RealtimeScript(default_text="Sure thing.")) as server:
        model = openai.realtime.RealtimeModel(api_key="dummy", base_url=server.base_url)
        session = AgentSession(llm=model, aec_warmup_duration=None)
        try:
            yield session
        finally:
            await session.aclose()
            await model.aclose()


def turnfsm_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage().startswith("turnfsm:")
    ]


async def test_agent_first_typed_runs_are_answered(
    text_session: AgentSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Was also: 'lever hold_user_turns failed: the session has no audio input' (the
    realtime hold shuts an input gate; a text session has no audio to hold)."""
    controller = TurnController(TurnPolicy(greeting="Thanks for calling."), keep_text=True)
    attach(text_session, controller)
    await text_session.start(TurnAgent(instructions="You answer."))
    for text in ("Hello?", "When do you open?"):
        result = await asyncio.wait_for(text_session.run(user_input=text), timeout=15)
        result.expect.next_event().is_message(role="assistant")
    assert turnfsm_warnings(caplog) == []


async def test_outbound_typed_runs_end_without_a_reply_and_say_why(
    text_session: AgentSession, caplog: pytest.LogCaptureFixture
) -> None:
    controller = TurnController(
        TurnPolicy(direction="outbound", greeting="Hi, this is Ada."), keep_text=True
    )
    attach(text_session, controller)
    await text_session.start(TurnAgent(instructions="You are Ada."))
    for text in ("Hello?", "Are you there?"):
        result = await asyncio.wait_for(text_session.run(user_input=text), timeout=15)
        result.expect.no_more_events()
    (warning,) = turnfsm_warnings(caplog)  # once per call
    assert "realtime model" in warning
    assert "first_speaker='agent'" in warning
    assert controller.state == "ringing"
