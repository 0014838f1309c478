"""Outbound SIP call on OpenAI Realtime: locked greeting and tool cap, held by turnfsm.

The model keeps its default server-side turn detection (``semantic_vad`` with
``create_response`` and ``interrupt_response``). Under it LiveKit alone cannot keep a
greeting uninterruptible (``allow_interruptions=False`` is downgraded, the server
cancels its own response when the callee speaks), and a server that answers tool output
on its own runs tools forever. turnfsm holds both (``turnfsm.adapters.livekit.realtime``):

* nothing is said before the callee picks up and speaks; the server's own answer to
  their "Hello?" is replaced by the greeting, said exactly and locked: the model hears
  silence while it plays (so its VAD cannot cancel it), and what the callee said over
  it is replayed afterwards and answered as one whole turn;
* an interrupted answer keeps only its heard part, locally and on the server;
* at most ``max_tool_steps`` tool rounds per user turn, then one spoken reply without
  tools.

Run a worker (``LIVEKIT_URL``, ``LIVEKIT_API_KEY``, ``LIVEKIT_API_SECRET``,
``OPENAI_API_KEY`` and ``SIP_OUTBOUND_TRUNK_ID`` set)::

    python examples/realtime_agent.py start

and dispatch a call to it::

    lk dispatch create --new-room --agent-name realtime-agent \\
        --metadata '{"phone_number": "+15550100"}'
"""

from __future__ import annotations

import json
import logging
import os

from livekit import agents, api
from livekit.agents import AgentSession, RunContext, function_tool, room_io
from livekit.plugins import openai

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach, watch_sip_participant

logger = logging.getLogger("realtime-agent")

AGENT_NAME = "realtime-agent"
GREETING = "Hi, this is Ada from Acme, calling about the order you placed last week."


class Caller(TurnAgent):
    """Ada, who can look up an order."""

    def __init__(self) -> None:
        super().__init__(
            instructions=(
                "You are Ada from Acme, calling a customer about their order. Be brief: "
                "one or two sentences per answer."
            )
        )

    @function_tool
    async def lookup_order(self, context: RunContext, order_number: str) -> str:
        """Looks up the delivery status of an order.

        Args:
            order_number: The order number the customer gives.
        """
        return f"Order {order_number} ships tomorrow."


def build_policy() -> TurnPolicy:
    """The call's turn-taking."""
    return TurnPolicy(
        direction="outbound",  # wait for the callee's first words, then greet
        greeting=GREETING,
        await_user_timeout=6.0,
        on_await_user_timeout="greet",
        greeting_lock="keep_listening",  # realtime: held audio, answered after the greeting
        greeting_overlap="answer_whole",
        interrupted_text="spoken",
        max_tool_steps=3,
        max_call_duration=10 * 60.0,
    )


def build_controller() -> TurnController:
    return TurnController(build_policy())


def build_session(*, api_key: str | None = None, base_url: str | None = None) -> AgentSession:
    """The session on the real realtime plugin (constructing it makes no network call).

    Args:
        api_key: OpenAI key (default: ``OPENAI_API_KEY``).
        base_url: An OpenAI-compatible endpoint instead of OpenAI's (e.g. a test server).
    """
    options = {"base_url": base_url} if base_url is not None else {}
    # the model's own server-side turn detection; vad=None because a local VAD with
    # client-side turn taking would switch it off
    model = openai.realtime.RealtimeModel(api_key=api_key, **options)
    return AgentSession(llm=model, vad=None)


async def entrypoint(ctx: agents.JobContext) -> None:
    dial = json.loads(ctx.job.metadata or "{}")
    phone_number: str = dial["phone_number"]
    identity = f"sip-{phone_number}"
    await ctx.connect()

    session = build_session()

    def hang_up(reason: str) -> None:
        logger.info("hanging up: %s", reason)
        ctx.delete_room()  # disconnects the callee; the session closes with the room

    adapter = attach(session, build_controller(), end_call=hang_up)
    await session.start(
        Caller(),
        room=ctx.room,
        room_options=room_io.RoomOptions(participant_identity=identity),
    )

    try:
        await ctx.api.sip.create_sip_participant(
            api.CreateSIPParticipantRequest(
                room_name=ctx.room.name,
                sip_trunk_id=os.environ["SIP_OUTBOUND_TRUNK_ID"],
                sip_call_to=phone_number,
                participant_identity=identity,
                wait_until_answered=True,
            )
        )
    except api.TwirpError as error:
        logger.error("call to %s failed: %s", phone_number, error.message)
        ctx.shutdown()
        return
    # answered: the watcher reports `active` now (and the hang-up later)
    stop_watching = watch_sip_participant(adapter, ctx.room, identity)

    async def stop() -> None:
        stop_watching()

    ctx.add_shutdown_callback(stop)


def worker_options() -> agents.WorkerOptions:
    """Explicit dispatch by name: calls are placed with ``lk dispatch create``."""
    return agents.WorkerOptions(entrypoint_fnc=entrypoint, agent_name=AGENT_NAME)


if __name__ == "__main__":
    agents.cli.run_app(worker_options())
