"""Inbound call with turnfsm: the agent greets first, tool loops are capped.

* The greeting plays locked as soon as the session starts; what the caller says over it
  is held and answered as one whole turn afterwards (``mute_input``: LiveKit's echo
  cancellation warm-up silences the STT for the first seconds of an inbound call's first
  speech, so ``keep_listening`` would lose them, and ``attach`` refuses it).
* A model that keeps calling tools gets exactly ``max_tool_steps`` rounds per turn, then
  one spoken reply without tools (or the fallback line, if it still calls a tool).
* An interrupted reply is remembered only as far as the caller heard it.
* After 12 s of silence the agent asks once if the caller is still there, then hangs up.

Run it (``LIVEKIT_URL``, ``LIVEKIT_API_KEY``, ``LIVEKIT_API_SECRET`` and
``OPENAI_API_KEY`` set; a SIP dispatch rule sends inbound calls to ``inbound-assistant``)::

    python examples/inbound_assistant.py download-files
    python examples/inbound_assistant.py start
"""

from __future__ import annotations

import logging

from livekit import agents
from livekit.agents import AgentSession, RunContext, function_tool
from livekit.plugins import openai, silero

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach

logger = logging.getLogger("inbound-assistant")

AGENT_NAME = "inbound-assistant"
GREETING = "Thanks for calling Acme Dental, this is Ada. How can I help you today?"

_APPOINTMENTS = {"+15550100": "Tuesday at 10:00 with Dr. Lee"}


class Receptionist(TurnAgent):
    """Answers questions about appointments; ``TurnAgent`` lets the machine shape turns."""

    def __init__(self) -> None:
        super().__init__(
            instructions=(
                "You are Ada, the receptionist of Acme Dental. Answer briefly. Use "
                "lookup_appointment to find a caller's appointment by phone number."
            )
        )

    @function_tool
    async def lookup_appointment(self, context: RunContext, phone_number: str) -> str:
        """Find the next appointment booked for a phone number.

        Args:
            phone_number: The caller's number, in E.164 form (e.g. +15550100).
        """
        return _APPOINTMENTS.get(phone_number, "no appointment found")


def build_policy() -> TurnPolicy:
    """The call's turn-taking."""
    return TurnPolicy(
        direction="inbound",  # the agent speaks first
        greeting=GREETING,
        greeting_lock="mute_input",
        greeting_overlap="answer_whole",
        max_tool_steps=2,
        tool_cap_fallback="Sorry, I couldn't look that up just now. Could you ask me again?",
        interrupted_text="spoken",
        idle_timeout=12.0,
        idle_max_reprompts=1,
        max_call_duration=15 * 60.0,
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
    await ctx.connect()
    session = build_session()

    def hang_up(reason: str) -> None:
        logger.info("hanging up: %s", reason)
        ctx.delete_room()

    attach(session, build_controller(), end_call=hang_up)  # before start: it greets
    await session.start(Receptionist(), room=ctx.room)


def worker_options() -> agents.WorkerOptions:
    return agents.WorkerOptions(entrypoint_fnc=entrypoint, agent_name=AGENT_NAME)


if __name__ == "__main__":
    agents.cli.run_app(worker_options())
