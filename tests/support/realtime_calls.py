"""One real turnfsm call on the real ``openai.realtime.RealtimeModel`` against
`RealtimeTestServer`, for the realtime tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from livekit.agents import AgentSession, function_tool
from livekit.agents.voice.events import SpeechCreatedEvent
from livekit.agents.voice.transcription.synchronizer import TranscriptSynchronizer
from livekit.plugins import openai

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, attach
from turnfsm.adapters.sim.io import PacedAudioOutput, PlayoutSegment, RecordingTextOutput
from turnfsm.adapters.sim.realtime import (
    SAMPLE_RATE,
    Fidelity,
    RealtimeScript,
    RealtimeTestServer,
    ResponsePolicy,
    ResponseRequest,
    ScriptedResponse,
    ToolCall,
)
from turnfsm.adapters.sim.realtime.replies import scripted_model, words_heard

from .tone import ToneMicrophone

__all__ = [
    "SHORT_GREETING",
    "Assistant",
    "Call",
    "LookupAgent",
    "Loudspeaker",
    "greet_after_hello",
    "greet_after_hello_started",
    "looks_up_once",
    "scripted_model",
    "served_call",
    "wait_finished",
    "words_heard",
]

SHORT_GREETING = "Hi, this is Ada from Acme."


class Loudspeaker(PacedAudioOutput):
    """The callee's loudspeaker; ``frozen`` keeps it from playing anything (LiveKit
    resumes its output for every speech, so a plain ``pause()`` does not hold)."""

    frozen = False

    def resume(self) -> None:
        if not self.frozen:
            super().resume()


class Assistant(TurnAgent):
    def __init__(self) -> None:
        super().__init__(instructions="You are Ada, a phone assistant.")
        self.cities: list[str] = []

    @function_tool
    async def get_weather(self, city: str) -> str:
        """Returns the weather in a city.

        Args:
            city: Name of the city.
        """
        self.cities.append(city)
        return f"sunny in {city}"


class LookupAgent(Assistant):
    """Also looks things up, taking the time each call asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[float] = []
        """When each lookup started (the loop's clock)."""

    @function_tool
    async def lookup(self, seconds: float) -> str:
        """Looks something up.

        Args:
            seconds: How long the lookup takes.
        """
        self.lookups.append(asyncio.get_running_loop().time())
        await asyncio.sleep(seconds)
        return "found"


def looks_up_once(lookups: Mapping[str, float], say: Callable[[str], str]) -> ResponsePolicy:
    """A model that answers each user turn named in ``lookups`` with one ``lookup`` of
    that many seconds (while tools are allowed), and anything else with ``say(turn)``."""

    def respond(request: ResponseRequest) -> ScriptedResponse:
        items = request.conversation
        last = max(i for i, item in enumerate(items) if item.get("role") == "user")
        turn = str(items[last]["content"][0].get("transcript"))
        answered = any(item.get("type") == "function_call_output" for item in items[last:])
        if turn in lookups and not answered and request.tool_choice != "none":
            return ScriptedResponse(tool_calls=(ToolCall("lookup", {"seconds": lookups[turn]}),))
        return ScriptedResponse(text=say(turn))

    return respond


class Call:
    """One real AgentSession on the real RealtimeModel, driven by a strict controller."""

    def __init__(self, server: RealtimeTestServer) -> None:
        self.server = server
        self.microphone = ToneMicrophone()
        self.speaker = Loudspeaker(sample_rate=SAMPLE_RATE)
        self.model: openai.realtime.RealtimeModel | None = None
        self.session: AgentSession | None = None
        self.adapter: TurnAdapter | None = None
        self.controller: TurnController | None = None
        self.agent = Assistant()
        self.created: list[SpeechCreatedEvent] = []

    async def start(
        self,
        policy: TurnPolicy,
        *,
        auto_tool_reply_generation: bool = False,
        transcript_sync: bool = False,
        **model: Any,
    ) -> tuple[AgentSession, TurnAdapter, TurnController]:
        """Starts the session; ``model`` holds further ``RealtimeModel`` arguments.
        ``transcript_sync`` puts LiveKit's ``TranscriptSynchronizer`` in front of the
        loudspeaker and a transcript sink, as RoomIO does in every deployment."""
        self.model = openai.realtime.RealtimeModel(
            api_key="dummy", **self.server.model_options(), **model
        )
        if auto_tool_reply_generation:  # a model that answers tool output on its own
            self.model.capabilities.auto_tool_reply_generation = True
        session: AgentSession = AgentSession(llm=self.model, vad=None, aec_warmup_duration=None)
        session.input.audio = self.microphone
        session.output.audio = self.speaker
        if transcript_sync:
            synchronizer = TranscriptSynchronizer(
                next_in_chain_audio=self.speaker, next_in_chain_text=RecordingTextOutput()
            )
            session.output.audio = synchronizer.audio_output
            session.output.transcription = synchronizer.text_output
        session.on("speech_created", self.created.append)
        controller = TurnController(policy, strict=True)
        adapter = attach(session, controller)
        self.session, self.adapter, self.controller = session, adapter, controller
        await session.start(self.agent)
        await self.server.wait_for_event(
            "session.update", predicate=lambda event: "tools" in event.payload["session"]
        )
        return session, adapter, controller

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.aclose()
        if self.model is not None:
            await self.model.aclose()
        await self.speaker.aclose()

    # -- helpers --------------------------------------------------------------------------

    async def segment_playing(self, index: int, *, timeout: float = 10.0) -> PlayoutSegment:
        """Waits until the loudspeaker's ``index``-th segment started playing."""
        deadline = time.monotonic() + timeout
        while (
            len(self.speaker.segments) <= index or self.speaker.segments[index].started_at is None
        ):
            assert time.monotonic() < deadline, f"segment {index} never played"
            await asyncio.sleep(0.01)
        return self.speaker.segments[index]

    async def played(self, segment: PlayoutSegment, seconds: float) -> None:
        """Waits until ``segment`` has played ``seconds``."""
        assert segment.started_at is not None
        loop = asyncio.get_running_loop()
        while loop.time() - segment.started_at < seconds:
            await asyncio.sleep(0.005)

    def speech_ended(self, speech_id: str) -> ev.AgentSpeechEnded:
        """The machine's record of a speech's end (played seconds from the PlayoutMeter)."""
        assert self.controller is not None
        assert self.controller.trace is not None
        (ended,) = [
            step.event
            for step in self.controller.trace
            if isinstance(step.event, ev.AgentSpeechEnded) and step.event.speech_id == speech_id
        ]
        return ended


@asynccontextmanager
async def served_call(
    fidelity: Fidelity | None = None, **server_options: Any
) -> AsyncIterator[Call]:
    """A call against its own server (at ``fidelity``, else the run's), closed on exit;
    ``server_options``: further `RealtimeTestServer` arguments (``chars_per_second``)."""
    async with RealtimeTestServer(RealtimeScript(), fidelity=fidelity, **server_options) as server:
        test_call = Call(server)
        try:
            yield test_call
        finally:
            await test_call.aclose()


async def wait_finished(segment: PlayoutSegment, timeout: float = 15.0) -> None:
    """Waits until ``segment`` finished playing (at most ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not segment.finished:
        assert time.monotonic() < deadline, "the segment never finished"
        await asyncio.sleep(0.01)


AUTO_REPLY = "Auto reply nobody should hear."
"""What the model would answer "Hello?" with on its own."""


async def greet_after_hello_started(
    call: Call, greeting: str = SHORT_GREETING, *, auto_reply: str = AUTO_REPLY, **model: Any
) -> tuple[AgentSession, TurnController]:
    """An outbound call whose model would answer "Hello?" on its own (``auto_reply``):
    answered, and the callee starts saying "Hello?" (0.6 s). ``model``: further
    ``RealtimeModel`` arguments."""
    call.server.script.policy = scripted_model([auto_reply])
    session, adapter, controller = await call.start(
        TurnPolicy(direction="outbound", greeting=greeting), **model
    )
    adapter.dispatch(ev.CallAnswered(at=adapter.now()))
    call.microphone.speak(0.6)
    return session, controller


async def greet_after_hello(
    call: Call, *, auto_reply: str = AUTO_REPLY
) -> tuple[AgentSession, TurnController, PlayoutSegment]:
    """`greet_after_hello_started`, and the short greeting plays to its end."""
    session, controller = await greet_after_hello_started(call, auto_reply=auto_reply)
    greeting = await call.segment_playing(0)
    await wait_finished(greeting)
    return session, controller, greeting
