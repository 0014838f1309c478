"""Inbound call with turnfsm: the agent greets first, tool loops are capped.

* The greeting plays locked as soon as the session starts; what the caller says over it
  is held and answered as one whole turn afterwards (``mute_input``: LiveKit's echo
  cancellation warm-up silences the STT for the first seconds of an inbound call's first
  speech, so ``keep_listening`` would lose them, and ``attach`` refuses it).
* A model that keeps calling tools gets exactly ``max_tool_steps`` rounds per turn, then
  one spoken reply without tools (or the fallback line, if it still calls a tool).
* An interrupted reply is remembered only as far as the caller heard it.
* After 12 s of silence the agent asks once if the caller is still there, then hangs up.
* Each call's trace is written to ``traces/`` (or ``$TRACE_DIR``) as it happens
  (``turnfsm timeline``, ``turnfsm report``).
* Set up as LiveKit's telephony examples are: the caller's audio cleaned for the phone
  band (``noise_cancellation.BVCTelephony()``, on LiveKit Cloud, when
  ``livekit-plugins-noise-cancellation`` is installed), LiveKit's turn detector, and the
  models' usage logged when the call ends.

Run it from the repository root with the LiveKit CLI (``lk``), after
``pip install 'turnfsm[examples]'`` and ``cp examples/.env.example .env`` with your keys
filled in (a SIP dispatch rule sends inbound calls to ``inbound-assistant``)::

    lk agent console examples/inbound_assistant.py   # talk to it from the terminal
    lk agent dev examples/inbound_assistant.py       # a worker on your LiveKit project
    lk agent start examples/inbound_assistant.py     # the same, for production
"""

from __future__ import annotations

import logging
import os

from dotenv import load_dotenv
from livekit.agents import (
    AgentServer,
    AgentSession,
    JobContext,
    JobProcess,
    RunContext,
    TurnHandlingOptions,
    cli,
    function_tool,
    inference,
    room_io,
)
from livekit.plugins import openai, silero

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.livekit.job import hang_up_room, trace_writer

try:  # LiveKit Cloud's noise cancellation (pip install livekit-plugins-noise-cancellation)
    from livekit.plugins import noise_cancellation
except ImportError:  # not installed: the caller's audio reaches the STT as it comes
    noise_cancellation = None

load_dotenv()

AGENT_NAME = "inbound-assistant"
logger = logging.getLogger(AGENT_NAME)
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


def build_session(proc: JobProcess) -> AgentSession:
    """The session with real plugins (constructing it makes no network call)."""
    return AgentSession(
        llm=openai.LLM(model="gpt-4.1-mini"),
        stt=openai.STT(),
        tts=openai.TTS(voice="ash"),
        vad=proc.userdata["vad"],
        # LiveKit's turn detector (its default, written out): LiveKit Cloud's model where
        # the worker reaches it, else the local one that comes with livekit-agents
        turn_handling=TurnHandlingOptions(turn_detection=inference.TurnDetector()),
    )


def build_room_options() -> room_io.RoomOptions:
    """The caller's audio, cleaned for the phone band when the plugin is installed."""
    cleaner = noise_cancellation.BVCTelephony() if noise_cancellation is not None else None
    return room_io.RoomOptions(audio_input=room_io.AudioInputOptions(noise_cancellation=cleaner))


def prewarm(proc: JobProcess) -> None:
    """Load the VAD once per worker process, before any call."""
    proc.userdata["vad"] = silero.VAD.load()


server = AgentServer(setup_fnc=prewarm)


@server.rtc_session(agent_name=AGENT_NAME)
async def inbound_assistant(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    await ctx.connect()
    session = build_session(ctx.proc)
    controller = TurnController(
        build_policy(), trace_sink=trace_writer(ctx, session, os.getenv("TRACE_DIR", "traces"))
    )
    # before start: the machine greets as soon as the session starts
    attach(session, controller, end_call=hang_up_room(ctx))

    async def log_usage() -> None:  # tokens, characters and audio seconds per model
        logger.info("usage: %s", session.usage)

    ctx.add_shutdown_callback(log_usage)
    await session.start(Receptionist(), room=ctx.room, room_options=build_room_options())


# LiveKit's older CLI (`python <file> start`), deprecated in 1.8.9 for `lk agent`; kept, as
# LiveKit's own examples keep it
if __name__ == "__main__":
    cli.run_app(server)
