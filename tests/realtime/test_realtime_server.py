"""The real OpenAI ``RealtimeModel`` and ``AgentSession`` against `RealtimeTestServer`."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import numpy as np
import pytest
from livekit.agents import Agent, AgentSession, function_tool
from livekit.agents.voice.events import SpeechCreatedEvent
from livekit.plugins import openai
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad, ServerVad

from turnfsm.adapters.sim.io import PacedAudioOutput
from turnfsm.adapters.sim.realtime import (
    FIDELITY_MATRIX,
    IDEAL,
    SAMPLE_RATE,
    RealtimeScript,
    RealtimeTestServer,
    ScriptedResponse,
    ToolCall,
)

from support.fidelity import pinned_fidelity
from support.tone import ToneMicrophone


class WeatherAgent(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You are a test agent.")
        self.cities: list[str] = []

    @function_tool
    async def get_weather(self, city: str) -> str:
        """Returns the weather in a city.

        Args:
            city: Name of the city.
        """
        self.cities.append(city)
        return f"sunny in {city}"


class Harness:
    """Starts real AgentSessions on the real RealtimeModel against one test server."""

    def __init__(self, server: RealtimeTestServer) -> None:
        self.server = server
        self._models: list[openai.realtime.RealtimeModel] = []
        self._sessions: list[AgentSession] = []
        self._speakers: list[PacedAudioOutput] = []

    async def start(
        self,
        agent: Agent,
        *,
        microphone: ToneMicrophone | None = None,
        llm: openai.realtime.RealtimeModel | None = None,
        **session_kwargs: object,
    ) -> tuple[AgentSession, openai.realtime.RealtimeModel, PacedAudioOutput]:
        """Starts a session and waits until the plugin has sent its start-up updates."""
        model = llm or openai.realtime.RealtimeModel(
            api_key="dummy", **self.server.model_options()
        )
        self._models.append(model)
        session: AgentSession = AgentSession(
            llm=model, vad=None, aec_warmup_duration=None, **session_kwargs
        )
        self._sessions.append(session)
        speaker = PacedAudioOutput(sample_rate=SAMPLE_RATE)
        self._speakers.append(speaker)
        session.input.audio = microphone
        session.output.audio = speaker
        await session.start(agent)
        # start-up: full session.update, instructions update, then the tools update
        await self.server.wait_for_event(
            "session.update", predicate=lambda event: "tools" in event.payload["session"]
        )
        return session, model, speaker

    async def aclose(self) -> None:
        for session in self._sessions:
            await session.aclose()
        for model in self._models:
            await model.aclose()
        for speaker in self._speakers:
            await speaker.aclose()


@pytest.fixture
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with RealtimeTestServer(fidelity=pinned_fidelity(request)) as server:
        test_harness = Harness(server)
        try:
            yield test_harness
        finally:
            await test_harness.aclose()


def _history_texts(session: AgentSession, role: str) -> list[str]:
    return [
        item.text_content or ""
        for item in session.history.items
        if item.type == "message" and item.role == role
    ]


async def test_generate_reply_plays_audio_and_lands_in_history(harness: Harness) -> None:
    server = harness.server
    text = "Hello there, how can I help?"  # 28 chars: 1.9 s at 15 chars/s
    server.script.push_response(text)
    session, _, speaker = await harness.start(Agent(instructions="Be brief."))

    handle = session.generate_reply(instructions="Greet the user.")
    await asyncio.wait_for(handle, 10)

    connection = server.connection
    assert connection.path == "/v1/realtime"
    assert connection.query == {"model": "gpt-realtime"}
    assert connection.authorization == "Bearer dummy"

    first_update = server.received[0]
    assert first_update.type == "session.update"
    assert first_update.payload["session"]["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad",
        "create_response": True,
        "eagerness": "medium",
        "interrupt_response": True,
    }
    assert server.session["instructions"] == "Be brief."

    (create,) = server.events_of_type("response.create")
    assert create.payload["response"]["instructions"] == "Be brief.\nGreet the user."
    assert create.payload["response"]["metadata"]["client_event_id"] == create.payload["event_id"]

    (segment,) = speaker.segments
    assert not segment.interrupted
    assert segment.played == pytest.approx(len(text) / 15, abs=0.15)
    tone = np.frombuffer(
        b"".join(
            base64.b64decode(event.payload["delta"])
            for event in server.events_of_type("response.output_audio.delta", direction="sent")
        ),
        dtype=np.int16,
    )
    assert len(tone) / SAMPLE_RATE == pytest.approx(segment.played, abs=0.15)
    assert np.abs(tone).max() > 5000
    assert _history_texts(session, "assistant") == [text]
    assert server.conversation_summary() == [("assistant", text)]
    assert server.responses[0].status == "completed"


async def _ask_again_after_a_dropped_connection(harness: Harness) -> AgentSession:
    """One question answered; the network drops the socket; once the plugin has connected
    again and sent its session anew, a second question."""
    server = harness.server
    server.script.push_response("First answer.")
    server.script.push_response("Second answer.")
    session, _, _ = await harness.start(Agent(instructions="Be brief."))
    await asyncio.wait_for(session.generate_reply(user_input="First question?"), 10)

    server.connection.drop()
    await server.wait_for_event(
        "session.update",
        predicate=lambda event: (
            event.connection == 1 and "instructions" in event.payload["session"]
        ),
    )
    await asyncio.wait_for(session.generate_reply(user_input="Second question?"), 10)
    return session


@pytest.mark.fidelity(IDEAL)  # the replayed conversation is confirmed at once
async def test_baseline_the_plugin_reconnects_after_a_dropped_connection(harness: Harness) -> None:
    """Plain LiveKit: when the network drops the socket, the plugin connects again, sends its
    session, instructions and conversation anew, and answers on the new connection."""
    server = harness.server
    session = await _ask_again_after_a_dropped_connection(harness)

    assert len(server.connections) == 2
    assert server.session["instructions"] == "Be brief."
    assert server.conversation_summary() == [
        ("user", "First question?"),
        ("assistant", "First answer."),
        ("user", "Second question?"),
        ("assistant", "Second answer."),
    ]
    assert _history_texts(session, "assistant") == ["First answer.", "Second answer."]


@pytest.mark.fidelity(FIDELITY_MATRIX["100ms-cancel-150ms"])
async def test_baseline_a_question_before_the_replay_is_confirmed_goes_first(
    harness: Harness,
) -> None:
    """Plain LiveKit, 100 ms away: a question asked after a reconnect, before the model has
    confirmed the conversation the plugin sent anew, is created at the conversation's root
    (the plugin's record of the model's conversation is empty until then), so the model
    reads it before everything said earlier."""
    server = harness.server
    session = await _ask_again_after_a_dropped_connection(harness)

    (second,) = [
        event
        for event in server.events_of_type("conversation.item.create")
        if event.payload["item"].get("content", [{}])[0].get("text") == "Second question?"
    ]
    assert second.payload["previous_item_id"] == "root"
    assert server.conversation_summary() == [
        ("user", "Second question?"),
        ("user", "First question?"),
        ("assistant", "First answer."),
        ("assistant", "Second answer."),
    ]
    assert _history_texts(session, "user") == ["First question?", "Second question?"]


@pytest.mark.fidelity(IDEAL)  # the instant cancel and the idealised timing
async def test_baseline_server_vad_auto_response_and_interrupt_response(harness: Harness) -> None:
    server = harness.server
    """Plain LiveKit: under server turn detection, allow_interruptions=False does not hold."""
    server.script.push_user_transcript("Stop, please.")
    server.script.push_response("Let me read you the whole list of our opening hours today.")
    server.script.push_response("Okay, stopping.")
    microphone = ToneMicrophone()
    session, _, speaker = await harness.start(Agent(instructions="x"), microphone=microphone)
    created: list[SpeechCreatedEvent] = []
    session.on("speech_created", created.append)

    handle = session.generate_reply(instructions="Read the list.", allow_interruptions=False)
    assert handle.allow_interruptions  # downgraded with a warning
    while not speaker.segments or speaker.segments[0].started_at is None:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.9)
    microphone.speak(0.6)

    started = await server.wait_for_event("input_audio_buffer.speech_started", direction="sent")
    done = await server.wait_for_event("response.done", direction="sent")
    assert done.payload["response"]["status"] == "cancelled"
    assert done.payload["response"]["status_details"]["reason"] == "turn_detected"
    assert done.timestamp - started.timestamp < 0.01
    await asyncio.wait_for(handle, 5)
    assert handle.interrupted
    assert speaker.segments[0].interrupted

    # the server commits the turn and answers it on its own: a speech the client did not ask for
    await server.wait_for_event("response.done", direction="sent", count=2, timeout=10)
    assert [r.trigger for r in server.responses] == ["response.create", "turn_detected"]
    assert [(ev.user_initiated, ev.source) for ev in created] == [
        (True, "generate_reply"),
        (False, "generate_reply"),
    ]
    await asyncio.wait_for(created[1].speech_handle, 5)
    assert _history_texts(session, "user") == ["Stop, please."]
    assert _history_texts(session, "assistant")[-1] == "Okay, stopping."


@pytest.mark.fidelity(IDEAL)  # the cancel follows speech_started at once: no latency
async def test_baseline_client_cancels_without_server_interrupt_response(
    harness: Harness,
) -> None:
    """interrupt_response=False on the server does not help: LiveKit cancels on speech_started."""
    server = harness.server
    server.script.push_response("Let me read you the whole list of our opening hours today.")
    microphone = ToneMicrophone()
    session, _, speaker = await harness.start(
        Agent(instructions="x"),
        microphone=microphone,
        llm=openai.realtime.RealtimeModel(
            api_key="dummy",
            **server.model_options(),
            turn_detection=SemanticVad(type="semantic_vad", interrupt_response=False),
        ),
    )
    assert server.turn_detection == {"type": "semantic_vad", "interrupt_response": False}

    handle = session.generate_reply(allow_interruptions=False)
    while not speaker.segments or speaker.segments[0].started_at is None:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)
    microphone.speak(0.3)
    started = await server.wait_for_event("input_audio_buffer.speech_started", direction="sent")
    cancel = await server.wait_for_event("response.cancel")
    await asyncio.wait_for(handle, 5)

    assert handle.interrupted
    # LiveKit cancels as soon as it hears speech_started (at zero latency, the same instant:
    # the order on the wire says the cancel answers it)
    assert server.events.index(started) < server.events.index(cancel)
    assert cancel.timestamp - started.timestamp < 0.1
    assert server.responses[0].status_reason == "client_cancelled"
    assert server.events_of_type("conversation.item.truncate")


@pytest.mark.fidelity(IDEAL)  # the truncated item keeps its heard transcript
async def test_interrupt_truncates_at_played_position(harness: Harness) -> None:
    server = harness.server
    text = "This is a fairly long answer that will be cut off after about a second."
    server.script.push_response(text)
    session, _, speaker = await harness.start(Agent(instructions="x"))

    handle = session.generate_reply()
    while not speaker.segments or speaker.segments[0].started_at is None:
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.0)
    await asyncio.wait_for(session.interrupt(), 5)
    await asyncio.wait_for(handle, 5)

    # the activity cancels, then its generation task may cancel again before response.done
    # arrives; the second cancel gets a "Cancellation failed" error the plugin ignores
    types = [event.type for event in server.received if event.type != "session.update"]
    assert types[0] == "response.create"
    assert set(types[1:-1]) == {"response.cancel"}
    assert types[-1] == "conversation.item.truncate"
    assert len(server.events_of_type("error", direction="sent")) == len(types) - 3
    (truncate,) = server.events_of_type("conversation.item.truncate")
    played_ms = speaker.segments[0].played * 1000
    assert truncate.payload["audio_end_ms"] == pytest.approx(played_ms, abs=2)
    assert truncate.payload["audio_end_ms"] == pytest.approx(1000, abs=150)
    assert server.responses[0].status_reason == "client_cancelled"

    await server.wait_for_event("conversation.item.truncated", direction="sent")
    heard = server.heard_prefix(text, truncate.payload["audio_end_ms"])
    assert server.conversation_summary() == [("assistant", heard)]
    assert (
        server.connection.item_audio_ms[truncate.payload["item_id"]]
        == (truncate.payload["audio_end_ms"])
    )
    # without a TranscriptSynchronizer LiveKit keeps the whole streamed text locally
    (message,) = [item for item in session.history.items if item.type == "message"]
    assert message.interrupted
    assert len(message.text_content or "") > len(heard)


async def test_tool_call_round_trip(harness: Harness) -> None:
    server = harness.server
    server.script.push_response(
        ScriptedResponse(tool_calls=(ToolCall("get_weather", {"city": "Paris"}),))
    )
    server.script.push_response("It is sunny in Paris.")
    agent = WeatherAgent()
    session, _, speaker = await harness.start(agent)

    handle = session.generate_reply(instructions="What's the weather in Paris?")
    await asyncio.wait_for(handle, 10)

    assert agent.cities == ["Paris"]
    assert server.session["tools"][0]["name"] == "get_weather"
    call_item = server.conversation[0]
    output_create = server.events_of_type("conversation.item.create")[-1].payload
    assert output_create["item"]["type"] == "function_call_output"
    assert output_create["item"]["call_id"] == call_item["call_id"]
    assert output_create["previous_item_id"] == call_item["id"]
    creates = server.events_of_type("response.create")
    assert [c.payload["response"].get("tool_choice") for c in creates] == [None, "auto"]
    assert server.conversation_summary() == [
        ("function_call", "get_weather"),
        ("function_call_output", "sunny in Paris"),
        ("assistant", "It is sunny in Paris."),
    ]
    assert handle.num_steps == 2
    assert len(speaker.segments) == 1


async def test_max_tool_steps_forces_tool_choice_none(harness: Harness) -> None:
    server = harness.server
    server.script = RealtimeScript(always_call_tool="get_weather", tool_arguments={"city": "Oslo"})
    agent = WeatherAgent()
    session, _, _ = await harness.start(agent, max_tool_steps=1)

    handle = session.generate_reply()
    await asyncio.wait_for(handle, 10)

    creates = server.events_of_type("response.create")
    assert [c.payload["response"].get("tool_choice") for c in creates] == [None, "auto", "none"]
    assert [r.request.tool_choice for r in server.responses] == ["auto", "auto", "none"]
    assert agent.cities == ["Oslo", "Oslo"]
    assert _history_texts(session, "assistant") == ["Okay."]


async def test_auto_tool_reply_is_cancelled_and_replaced_by_the_plugin(
    harness: Harness,
) -> None:
    """The OpenAI plugin cancels a server-side tool reply and asks for its own."""
    server = harness.server
    server.script = RealtimeScript(
        [
            ScriptedResponse(tool_calls=(ToolCall("get_weather", {"city": "Rome"}),)),
            "Auto reply from the server.",
            "Reply asked by the client.",
        ],
        auto_tool_reply=True,
    )
    session, _, _ = await harness.start(WeatherAgent())
    created: list[SpeechCreatedEvent] = []
    session.on("speech_created", created.append)

    handle = session.generate_reply()
    await asyncio.wait_for(handle, 10)

    assert [(r.trigger, r.status, r.status_reason) for r in server.responses] == [
        ("response.create", "completed", None),
        ("tool_output", "cancelled", "client_cancelled"),
        ("response.create", "completed", None),
    ]
    assert [ev.user_initiated for ev in created] == [True, False]
    assert _history_texts(session, "assistant")[-1] == "Reply asked by the client."


@pytest.mark.fidelity(IDEAL)
async def test_baseline_a_model_answering_tool_output_stalls_livekit(harness: Harness) -> None:
    """Plain LiveKit, a model that answers tool output itself (LiveKit not told, so it asks
    for the next step too), a cap of two steps. On the wall clock LiveKit runs tools on and
    on; on the virtual clock, where running the tool takes no time, it waits forever after
    the second step: its scheduler authorizes another generation of the speech before the
    step ends, and the step's ``while self._current_speech or self._speech_q`` poll waits
    for that speech. The second output is never sent, nothing plays. turnfsm's tests of
    such a model keep it 100 ms away (test_turnfsm_realtime.TOOL_REPLYING_MODEL_LATENCY_MS),
    where the cap lands first."""
    server = harness.server
    server.script = RealtimeScript(
        always_call_tool="get_weather",
        tool_arguments={"city": "Oslo"},
        auto_tool_reply=True,
        default_text="It is sunny in Oslo.",
    )
    agent = WeatherAgent()
    session, _, speaker = await harness.start(agent, max_tool_steps=2)

    handle = session.generate_reply(user_input="What's the weather in Oslo?")
    await asyncio.sleep(5.0)

    outputs = [
        event
        for event in server.events_of_type("conversation.item.create")
        if event.payload["item"]["type"] == "function_call_output"
    ]
    assert agent.cities == ["Oslo", "Oslo", "Oslo"]
    assert len(outputs) == 1  # the later steps' outputs never leave
    assert not handle.done()
    assert speaker.segments == []


async def test_update_options_switches_server_turn_detection(harness: Harness) -> None:
    server = harness.server
    microphone = ToneMicrophone()
    session, model, _ = await harness.start(Agent(instructions="x"), microphone=microphone)
    assert server.turn_detection is not None
    assert server.turn_detection["type"] == "semantic_vad"

    updates = len(server.events_of_type("session.update"))
    model.update_options(turn_detection=None)
    await server.wait_for_event("session.update", count=updates + 1)
    assert server.received[-1].payload["session"] == {
        "type": "realtime",
        "audio": {"input": {"turn_detection": None}},
    }
    assert server.turn_detection is None
    assert not model.capabilities.turn_detection
    # the activity resolved server turn detection once at start: it still downgrades
    # allow_interruptions=False, and nobody commits the user's audio any more
    server.script.push_response("Ok.")
    handle = session.generate_reply(allow_interruptions=False)
    assert handle.allow_interruptions
    await asyncio.wait_for(handle, 5)
    microphone.speak(0.3)
    await asyncio.sleep(0.8)
    assert not server.events_of_type("input_audio_buffer.speech_started", direction="sent")
    assert not server.events_of_type("input_audio_buffer.commit")

    model.update_options(
        turn_detection=ServerVad(type="server_vad", silence_duration_ms=300, create_response=False)
    )
    await server.wait_for_event("session.update", count=updates + 2)
    assert server.turn_detection == {
        "type": "server_vad",
        "silence_duration_ms": 300,
        "create_response": False,
    }
    microphone.speak(0.3)
    stopped = await server.wait_for_event("input_audio_buffer.speech_stopped", direction="sent")
    started = server.events_of_type("input_audio_buffer.speech_started", direction="sent")[0]
    assert stopped.payload["audio_end_ms"] - started.payload["audio_start_ms"] == pytest.approx(
        300 + 300 + 300, abs=120
    )
    await asyncio.sleep(0.3)
    assert [r.trigger for r in server.responses] == ["response.create"]
    connection = server.connection
    assert connection.turn_detection_at(started.timestamp) == server.turn_detection
    while_turn_detection_off = server.events_of_type("response.create")[0].timestamp
    assert connection.turn_detection_at(while_turn_detection_off) is None
