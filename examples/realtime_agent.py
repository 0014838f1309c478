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

* LiveKit's answering-machine detection feeds the machine; each call's trace is
  written to ``traces/`` (or ``$TRACE_DIR``) as it happens.
* Set up as LiveKit's telephony examples are: the callee's audio cleaned for the phone
  band (``noise_cancellation.BVCTelephony()``, on LiveKit Cloud, when
  ``livekit-plugins-noise-cancellation`` is installed) and the models' usage logged when
  the call ends; the model's server detects the turns, so no turn detector runs here.

Run it from the repository root with the LiveKit CLI (``lk``), after
``pip install 'turnfsm[examples]'`` and ``cp examples/.env.example .env`` with your keys
and ``SIP_OUTBOUND_TRUNK_ID`` filled in::

    lk agent console examples/realtime_agent.py   # talk to it from the terminal
    lk agent dev examples/realtime_agent.py       # a worker on your LiveKit project
    lk agent start examples/realtime_agent.py     # the same, for production

Under ``console`` no call is placed: the call is answered at once and the agent waits for
your "Hello?". A worker places a call when a job is dispatched to it::

    lk dispatch create --new-room --agent-name realtime-agent \\
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
    RunContext,
    cli,
    function_tool,
    room_io,
)
from livekit.plugins import openai

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
except ImportError:  # not installed: the callee's audio reaches the model as it comes
    noise_cancellation = None

load_dotenv()

AGENT_NAME = "realtime-agent"
logger = logging.getLogger(AGENT_NAME)
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


def build_room_options(participant_identity: str) -> room_io.RoomOptions:
    """The callee's audio, cleaned for the phone band when the plugin is installed."""
    cleaner = noise_cancellation.BVCTelephony() if noise_cancellation is not None else None
    return room_io.RoomOptions(
        participant_identity=participant_identity,
        audio_input=room_io.AudioInputOptions(noise_cancellation=cleaner),
    )


server = AgentServer()  # no prewarm: the model's server detects turns (no local VAD)


@server.rtc_session(agent_name=AGENT_NAME)
async def realtime_agent(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    phone_number = phone_number_to_dial(ctx)  # None: logged, the job shuts down
    if phone_number is None:
        return
    identity = f"sip-{phone_number}"
    await ctx.connect()

    session = build_session()
    controller = TurnController(
        build_policy(), trace_sink=trace_writer(ctx, session, os.getenv("TRACE_DIR", "traces"))
    )
    adapter = attach(session, controller, end_call=hang_up_room(ctx))

    async def log_usage() -> None:  # tokens and audio seconds per model
        logger.info("usage: %s", session.usage)

    ctx.add_shutdown_callback(log_usage)
    await session.start(Caller(), room=ctx.room, room_options=build_room_options(identity))
    await place_sip_call(
        ctx,
        adapter,
        phone_number=phone_number,
        participant_identity=identity,
        trunk_id=os.getenv("SIP_OUTBOUND_TRUNK_ID", ""),
        answering_machine_llm=openai.LLM(model="gpt-4.1-mini"),  # AMD needs a text LLM
    )


# LiveKit's older CLI (`python <file> start`), deprecated in 1.8.9 for `lk agent`; kept, as
# LiveKit's own examples keep it
if __name__ == "__main__":
    cli.run_app(server)
