"""Outbound SIP call with turnfsm: dial, wait for the callee's "Hello?", greet locked.

* Nothing is said before the callee picks up and speaks: the call is ``ringing`` until
  the SIP participant's ``sip.callStatus`` becomes ``active``, then the agent waits for
  the callee's first words (or greets anyway after ``await_user_timeout`` of silence).
* The greeting is the reply to those first words, so "Hello?" stays in the history,
  before the greeting.
* Nothing the callee says interrupts the greeting; what they say over it is answered
  as one whole turn once the greeting is over.
* LiveKit's answering-machine detection feeds the machine: a voicemail is hung up on.
* Each call's trace is written to ``traces/`` (or ``$TRACE_DIR``) as it happens
  (``turnfsm timeline``, ``turnfsm report``).
* Set up as LiveKit's telephony examples are: the callee's audio cleaned for the phone
  band (``noise_cancellation.BVCTelephony()``, on LiveKit Cloud, when
  ``livekit-plugins-noise-cancellation`` is installed), LiveKit's turn detector, and the
  models' usage logged when the call ends.

Run it from the repository root with the LiveKit CLI (``lk``), after
``pip install 'turnfsm[examples]'`` and ``cp examples/.env.example .env`` with your keys
and ``SIP_OUTBOUND_TRUNK_ID`` filled in::

    lk agent console examples/outbound_caller.py   # talk to it from the terminal
    lk agent dev examples/outbound_caller.py       # a worker on your LiveKit project
    lk agent start examples/outbound_caller.py     # the same, for production

Under ``console`` no call is placed: the call is answered at once and the agent waits for
your "Hello?". A worker places a call when a job is dispatched to it::

    lk dispatch create --new-room --agent-name outbound-caller \\
        --metadata '{"phone_number": "+15550100"}'
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
    TurnHandlingOptions,
    cli,
    inference,
    room_io,
)
from livekit.plugins import openai, silero

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.livekit.job import (
    hang_up_room,
    phone_number_to_dial,
    place_sip_call,
    trace_writer,
)

try:  # LiveKit Cloud's noise cancellation (pip install livekit-plugins-noise-cancellation)
    from livekit.plugins import noise_cancellation
except ImportError:  # not installed: the callee's audio reaches the STT as it comes
    noise_cancellation = None

load_dotenv()

AGENT_NAME = "outbound-caller"
logger = logging.getLogger(AGENT_NAME)
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
        on_answering_machine="hang_up",
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


def build_room_options(participant_identity: str) -> room_io.RoomOptions:
    """The callee's audio, cleaned for the phone band when the plugin is installed."""
    cleaner = noise_cancellation.BVCTelephony() if noise_cancellation is not None else None
    return room_io.RoomOptions(
        participant_identity=participant_identity,
        audio_input=room_io.AudioInputOptions(noise_cancellation=cleaner),
    )


def prewarm(proc: JobProcess) -> None:
    """Load the VAD once per worker process, before any call."""
    proc.userdata["vad"] = silero.VAD.load()


server = AgentServer(setup_fnc=prewarm)


@server.rtc_session(agent_name=AGENT_NAME)
async def outbound_caller(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    phone_number = phone_number_to_dial(ctx)  # None: logged, the job shuts down
    if phone_number is None:
        return
    identity = f"sip-{phone_number}"
    await ctx.connect()

    session = build_session(ctx.proc)
    controller = TurnController(
        build_policy(), trace_sink=trace_writer(ctx, session, os.getenv("TRACE_DIR", "traces"))
    )
    adapter = attach(session, controller, end_call=hang_up_room(ctx))

    async def log_usage() -> None:  # tokens, characters and audio seconds per model
        logger.info("usage: %s", session.usage)

    ctx.add_shutdown_callback(log_usage)
    await session.start(Caller(), room=ctx.room, room_options=build_room_options(identity))
    await place_sip_call(
        ctx,
        adapter,
        phone_number=phone_number,
        participant_identity=identity,
        trunk_id=os.getenv("SIP_OUTBOUND_TRUNK_ID", ""),
    )


# LiveKit's older CLI (`python <file> start`), deprecated in 1.8.9 for `lk agent`; kept, as
# LiveKit's own examples keep it
if __name__ == "__main__":
    cli.run_app(server)
