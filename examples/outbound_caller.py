"""Outbound SIP call with turnfsm: dial, wait for the callee's "Hello?", greet locked.

* Nothing is said before the callee picks up and speaks: the call is ``ringing`` until
  the SIP participant's ``sip.callStatus`` becomes ``active``, then the agent waits for
  the callee's first words (or greets anyway after ``await_user_timeout`` of silence).
* The greeting is the reply to those first words, so "Hello?" stays in the history,
  before the greeting.
* Nothing the callee says interrupts the greeting; what they say over it is answered
  as one whole turn once the greeting is over.

Run a worker (``LIVEKIT_URL``, ``LIVEKIT_API_KEY``, ``LIVEKIT_API_SECRET``,
``OPENAI_API_KEY`` and ``SIP_OUTBOUND_TRUNK_ID`` set; ``download-files`` once for the
turn detector and VAD models)::

    python examples/outbound_caller.py download-files
    python examples/outbound_caller.py start

and dispatch a call to it::

    lk dispatch create --new-room --agent-name outbound-caller \\
        --metadata '{"phone_number": "+15550100"}'
"""

from __future__ import annotations

import json
import logging
import os

from livekit import agents, api
from livekit.agents import AgentSession, room_io
from livekit.plugins import openai, silero

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach, watch_sip_participant

logger = logging.getLogger("outbound-caller")

AGENT_NAME = "outbound-caller"
GREETING = "Hi, this is Ada calling from Acme Dental about your appointment tomorrow."


class Caller(TurnAgent):
    """The agent on the call; ``TurnAgent`` lets the machine shape turns and greeting."""

    def __init__(self) -> None:
        super().__init__(
            instructions=(
                "You are Ada, calling from Acme Dental to confirm the callee's appointment "
                "tomorrow at ten. Be brief and friendly. If they cannot talk, offer to call "
                "back later."
            )
        )


def build_policy() -> TurnPolicy:
    """The call's turn-taking."""
    return TurnPolicy(
        direction="outbound",  # wait for the callee's first words, then greet
        greeting=GREETING,
        await_user_timeout=6.0,
        on_await_user_timeout="greet",
        greeting_lock="keep_listening",
        greeting_overlap="answer_whole",
        interrupted_text="spoken",
        max_tool_steps=3,
        max_call_duration=10 * 60.0,
    )


def build_controller() -> TurnController:
    return TurnController(build_policy())


def build_session() -> AgentSession:
    """The session with real plugins (constructing it makes no network call)."""
    return AgentSession(
        llm=openai.LLM(model="gpt-4.1-mini"),
        stt=openai.STT(),
        tts=openai.TTS(voice="ash"),
        vad=silero.VAD.load(),
    )


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
        logger.error(
            "call to %s failed: %s (SIP status %s)",
            phone_number,
            error.message,
            error.metadata.get("sip_status_code"),
        )
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
