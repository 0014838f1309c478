"""Issue 13, point 1: each missing piece of the embedding is refused, saying what to add.

The refusals happen before anything starts: the session is real (scripted models,
simulated audio), and after a refusal it has not started and no audio was played.
"""

from __future__ import annotations

import pytest
from livekit import rtc
from livekit.agents import Agent, AgentSession, room_io

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.livekit.embedding import EmbeddingError, needs_agent_hooks
from turnfsm.adapters.sim import SimulatedCall
from turnfsm.adapters.sim.job import ConsoleSession
from turnfsm.reach import ends_of_its_own

OUTBOUND = TurnPolicy(direction="outbound", greeting="Hi, this is Ada from Acme.")
HANGS_UP = TurnPolicy(first_speaker="user", idle_timeout=10.0, max_call_duration=600.0)
"""Listens first (nothing is said, so closing the call cuts no greeting), and hangs up."""


def plain_agent() -> Agent:
    return Agent(instructions="You are on a call.")


def turn_agent() -> TurnAgent:
    return TurnAgent(instructions="You are on a call.")


async def refused_start(session: AgentSession, agent: Agent, **options: object) -> str:
    with pytest.raises(EmbeddingError) as refusal:
        await session.start(agent=agent, **options)  # type: ignore[arg-type]
    assert not session._started  # refused before LiveKit started anything
    return str(refusal.value)


async def test_a_plain_agent_under_an_outbound_policy_is_refused_at_start() -> None:
    call = SimulatedCall()
    session = call.build_session()
    attach(session, TurnController(OUTBOUND))
    message = await refused_start(session, plain_agent())
    assert "Agent has no TurnAgent hooks" in message
    assert "callee's first words" in message  # why this policy needs them
    assert "Derive your agent from turnfsm.adapters.livekit.TurnAgent" in message  # the fix
    assert not call.audio_output.segments
    await call.aclose()


async def test_a_sip_call_without_end_call_is_refused_at_start() -> None:
    session = SimulatedCall().build_session()
    attach(session, TurnController(HANGS_UP))  # no end_call
    room = rtc.Room()  # never connected: the refusal comes first
    options = room_io.RoomOptions(participant_identity="sip-+15550100")
    message = await refused_start(session, turn_agent(), room=room, room_options=options)
    assert "(ends max_duration, idle)" in message  # the policy's own hang-ups
    assert "attach() got no end_call" in message
    assert "SIP callee would stay on a silent line" in message
    assert "delete_room_on_close is off by default" in message
    assert "hang_up_room(ctx)" in message  # what to add


@pytest.mark.parametrize(
    ("end_call", "room_options"),
    [
        (lambda reason: None, room_io.RoomOptions()),
        (None, room_io.RoomOptions(delete_room_on_close=True)),
    ],
    ids=["end_call", "delete_room_on_close"],
)
async def test_a_sip_call_that_can_hang_up_starts(end_call: object, room_options: object) -> None:
    call = SimulatedCall()
    session = call.build_session(ConsoleSession)  # the room is not used, as under console
    adapter = attach(session, TurnController(HANGS_UP), end_call=end_call)  # type: ignore[arg-type]
    await session.start(turn_agent(), room=rtc.Room(), room_options=room_options)
    await call.wait_started()
    assert adapter.controller.state == "listening"
    await call.aclose()


def test_what_each_policy_needs() -> None:
    assert needs_agent_hooks(OUTBOUND)
    assert not needs_agent_hooks(TurnPolicy(greeting="Hi."))  # the agent greets: session.say
    # the ways a policy hangs up on its own, read from the chart
    assert ends_of_its_own(TurnPolicy(first_speaker="user")) == ()  # only the caller
    assert ends_of_its_own(TurnPolicy()) == ()  # the agent greets in its own words
    assert ends_of_its_own(TurnPolicy(greeting="Hi.")) == ("greeting_failed",)
    assert ends_of_its_own(OUTBOUND) == ("answering_machine", "greeting_failed")
    assert ends_of_its_own(HANGS_UP) == ("max_duration", "idle")
