"""turnfsm with the real ``openai.realtime.RealtimeModel`` against `RealtimeTestServer`.

The lock, the truncation and the tool cap (issue 5) under the model's default server-side
turn detection: every assertion about what the model was told is read from the events the
server received, and every assertion about what the caller heard from the loudspeaker.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from livekit.agents import AgentSession, llm
from livekit.agents.voice.events import ErrorEvent
from livekit.plugins import openai

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, attach
from turnfsm.adapters.livekit.realtime import say_exactly
from turnfsm.adapters.sim.io import PlayoutSegment
from turnfsm.adapters.sim.realtime import (
    FIDELITY_MATRIX,
    Fidelity,
    RealtimeScript,
    RealtimeTestServer,
    RecordedEvent,
)

from support.fidelity import pinned_fidelity
from support.realtime_calls import (
    SHORT_GREETING,
    Call,
    greet_after_hello,
    scripted_model,
    served_call,
    wait_finished,
    words_heard,
)

CPS = 15.0  # the server's speaking rate: a reply lasts len(text) / 15 s

GREETING = "Hi, this is Ada from Acme, calling about the order you placed last week."
LONG_ANSWER = (
    "Our shop opens at nine and closes at six, and on every Sunday we open at ten "
    "and close at four."
)


@pytest.fixture
async def call(request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    async with served_call(pinned_fidelity(request)) as test_call:
        yield test_call


TOOL_REPLYING_MODEL_LATENCY_MS = 100
"""The one-way latency a model that answers tool output itself (LiveKit not told) is run
at. On the virtual clock, where running a tool takes no time, LiveKit can wait forever on
the speech it re-queued for the next step (test_realtime_server.py::
test_baseline_a_model_answering_tool_output_stalls_livekit); with the model's own reply
100 ms away turnfsm's cap lands first (at 20 ms it still stalls)."""


def tool_replying_model(fidelity: Fidelity) -> Fidelity:
    """``fidelity`` with at least `TOOL_REPLYING_MODEL_LATENCY_MS` each way."""
    latency = max(fidelity.network_latency_ms, TOOL_REPLYING_MODEL_LATENCY_MS)
    return replace(fidelity, network_latency_ms=latency)


@pytest.fixture(autouse=True)
def _no_turnfsm_warnings(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    yield
    problems = [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING and record.getMessage().startswith("turnfsm:")
    ]
    assert problems == []


def _rms(event: RecordedEvent) -> float:
    samples = np.frombuffer(base64.b64decode(event.payload["audio"]), dtype="<i2")
    return (
        float(np.sqrt(np.mean((samples.astype(np.float64) / 32768) ** 2))) if len(samples) else 0.0
    )


def _voiced_appends(server: RealtimeTestServer, start: float, end: float) -> list[RecordedEvent]:
    return [
        event
        for event in server.events_of_type("input_audio_buffer.append")
        if start <= event.timestamp <= end and _rms(event) > 0.02
    ]


def _position(server: RealtimeTestServer, event: RecordedEvent) -> int:
    """Where an event is on the wire. At zero latency a request and what answers it share
    an instant: their order tells which came first, not their timestamps."""
    return next(index for index, recorded in enumerate(server.events) if recorded is event)


def _received_while_active(
    server: RealtimeTestServer, response_id: str, type_: str
) -> list[RecordedEvent]:
    """The client events of one type the server handled between a response's
    ``response.created`` and its ``response.done``."""

    def names_it(event: RecordedEvent) -> bool:
        return bool(event.payload.get("response", {}).get("id") == response_id)

    (created,) = filter(names_it, server.events_of_type("response.created", direction="sent"))
    done = list(filter(names_it, server.events_of_type("response.done", direction="sent")))
    end = _position(server, done[0]) if done else len(server.events)
    return [
        event
        for event in server.events[_position(server, created) : end]
        if event.type == type_ and event.direction == "received"
    ]


def _texts(session: AgentSession, role: str) -> list[str]:
    return [
        item.text_content or ""
        for item in session.history.items
        if item.type == "message" and item.role == role
    ]


async def _assistant_texts(session: AgentSession, count: int, timeout: float = 5.0) -> list[str]:
    """The assistant's messages once ``count`` are in the history (or the timeout passed):
    LiveKit adds a reply's message a few awaits after its audio finished playing, so right
    after the end of the playout it may not be there yet."""
    deadline = time.monotonic() + timeout
    while len(_texts(session, "assistant")) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return _texts(session, "assistant")


# ------------------------------------------------------------------------- (a) the lock


async def test_greeting_is_not_cut_by_server_turn_detection(call: Call) -> None:
    server = call.server
    server.script.policy = scripted_model([LONG_ANSWER, "Okay, go ahead."])
    policy = TurnPolicy(direction="outbound", greeting=GREETING)  # keep_listening, answer_whole
    session, adapter, controller = await call.start(policy)
    assert server.turn_detection is not None
    assert server.turn_detection["type"] == "semantic_vad"
    adapter.dispatch(ev.CallAnswered(at=adapter.now()))

    call.microphone.speak(0.6)  # "Hello?"
    greeting = await call.segment_playing(0)
    await call.played(greeting, 1.5)
    call.microphone.speak(1.0)  # talks over the greeting from 1.5 s
    await wait_finished(greeting)
    # the loudspeaker's own clock (the loop's, as the server's records): polling for the
    # end would let the replayed overlap look as if it came in the lock
    assert greeting.started_at is not None
    assert greeting.finished_at is not None
    greeting_started, greeting_ended = greeting.started_at, greeting.finished_at

    # the whole greeting was heard
    assert greeting.interrupted is False
    assert greeting.played == pytest.approx(greeting.pushed, abs=0.01)
    assert greeting.played == pytest.approx(len(GREETING) / CPS, abs=0.25)
    assert controller.state != "greeting"
    assert adapter.gate is not None
    assert not adapter.gate.muted

    # the model never answered "Hello?" itself (its own replies were off from its link
    # on): the greeting is its first response
    greeted = server.responses[0]
    assert greeted.trigger == "response.create"
    assert greeted.request.instructions is not None
    assert say_exactly(GREETING) in greeted.request.instructions
    assert (greeted.status, greeted.reply.text) == ("completed", GREETING)
    assert greeted.request.tool_choice == "none"
    # nobody cancelled the greeting, and the model heard only silence while it played
    assert greeted.done_at is not None
    assert not _received_while_active(server, greeted.id, "response.cancel")
    assert not _voiced_appends(server, greeting_started + 0.2, greeting_ended - 0.1)
    assert not [
        e
        for e in server.events_of_type("input_audio_buffer.speech_started", direction="sent")
        if greeting_started < e.timestamp < greeting_ended
    ]

    # the overlap was held and is answered whole after the greeting
    answer = await call.segment_playing(1)
    assert _voiced_appends(server, greeting_ended, asyncio.get_running_loop().time())
    assert server.responses[1].trigger == "turn_detected"
    assert server.responses[1].reply.text == LONG_ANSWER

    # a barge-in after the greeting interrupts as usual
    await call.played(answer, 1.0)
    call.microphone.speak(0.5)
    barge_in = await server.wait_for_event(
        "input_audio_buffer.speech_started",
        direction="sent",
        predicate=lambda e: e.timestamp > greeting_ended + 1.0,
    )
    truncate = await server.wait_for_event("conversation.item.truncate", timeout=5)
    assert _position(server, truncate) > _position(server, barge_in)
    assert truncate.payload["item_id"] == server.responses[1].message_item_id
    assert server.responses[1].status == "cancelled"
    assert answer.interrupted
    assert truncate.payload["audio_end_ms"] == pytest.approx(answer.played * 1000, abs=100)
    assert server.turn_detection is not None
    assert server.turn_detection["type"] == "semantic_vad"

    await server.wait_for_event("response.done", direction="sent", count=3, timeout=10)
    assert _texts(session, "assistant")[0] == GREETING


async def test_inbound_muted_greeting_drops_the_overlap(call: Call) -> None:
    """Inbound, ``mute_input`` + ``drop``: speech over the greeting is never answered."""
    server = call.server
    server.script.policy = scripted_model(["Sure, what can I do?"])
    policy = TurnPolicy(
        direction="inbound", greeting=GREETING, greeting_lock="mute_input", greeting_overlap="drop"
    )
    session, adapter, controller = await call.start(policy)
    greeting = await call.segment_playing(0)
    started = asyncio.get_running_loop().time()
    await call.played(greeting, 1.0)
    call.microphone.speak(0.8)
    await wait_finished(greeting)
    ended = asyncio.get_running_loop().time()
    assert greeting.interrupted is False
    assert greeting.played == pytest.approx(len(GREETING) / CPS, abs=0.25)
    (greeted,) = server.responses
    assert greeted.trigger == "response.create"
    assert greeted.reply.text == GREETING
    assert not server.events_of_type("response.cancel")
    assert not _voiced_appends(server, started, ended)

    await asyncio.sleep(1.2)  # the dropped overlap is not answered
    assert len(server.responses) == 1
    assert adapter.gate is not None
    assert not adapter.gate.muted
    call.microphone.speak(0.5)  # but the caller is heard again
    answer = await call.segment_playing(1)
    assert server.responses[1].trigger == "turn_detected"
    await wait_finished(answer)
    assert await _assistant_texts(session, 2) == [GREETING, "Sure, what can I do?"]


# ---------------------------------------------------------------- (b) unspoken output


INBOUND = TurnPolicy(direction="inbound", first_speaker="user")  # no greeting: listening


async def test_barge_in_truncates_server_item_to_played_audio(call: Call) -> None:
    server = call.server
    server.script.policy = scripted_model([LONG_ANSWER, "Sure."])
    session, adapter, controller = await call.start(INBOUND)
    assert len(LONG_ANSWER) / CPS == pytest.approx(6.0, abs=0.5)

    handle = session.generate_reply(user_input="When are you open?")
    answer = await call.segment_playing(0)
    await call.played(answer, 2.0)
    call.microphone.speak(0.5)
    truncate = await server.wait_for_event("conversation.item.truncate", timeout=5)
    await asyncio.wait_for(handle, 5)

    # the server item is cut where the caller stopped hearing it
    (message_id,) = [r.message_item_id for r in server.responses[:1]]
    assert truncate.payload["item_id"] == message_id
    ended = call.speech_ended(handle.id)
    assert ended.interrupted
    # the barge-in reaches the server and its speech_started the client a latency later each
    round_trip = 2 * server.fidelity.network_latency_ms / 1000
    assert ended.played_seconds == pytest.approx(2.0 + round_trip, abs=0.35)
    assert truncate.payload["audio_end_ms"] == pytest.approx(ended.played_seconds * 1000, abs=100)
    assert not server.events_of_type("conversation.item.delete")
    await server.wait_for_event("conversation.item.truncated", direction="sent")

    # local history: at most the spoken prefix, the same item as the server's
    (local,) = [m for m in session.history.items if m.type == "message" and m.id == message_id]
    assert isinstance(local, llm.ChatMessage)
    assert local.interrupted
    spoken = local.text_content or ""
    assert spoken
    assert LONG_ANSWER.startswith(spoken)
    assert len(spoken) < len(LONG_ANSWER)
    # only words heard to their end, at most two short of them: the reply's audio had
    # not all come, so the cut is conservative (the slowest rate seen, one word earlier)
    heard = words_heard(server, LONG_ANSWER, ended.played_seconds)
    assert spoken.split() == heard[: len(spoken.split())]
    assert len(spoken.split()) >= len(heard) - 2
    agent_item = session.current_agent.chat_ctx.get_by_id(message_id)
    assert isinstance(agent_item, llm.ChatMessage)
    assert agent_item.text_content == spoken
    # the plugin's view of the server agrees too, so no later diff rewrites the item
    await server.wait_for_event("response.done", direction="sent", count=2, timeout=10)
    await wait_finished(await call.segment_playing(1))  # the reply to the barge-in, committed
    await asyncio.sleep(0.3 + round_trip)
    assert not server.events_of_type("conversation.item.delete")
    assert [i["id"] for i in server.conversation if i.get("role") == "assistant"] == [
        i.id
        for i in session.current_agent.chat_ctx.items
        if i.type == "message" and i.role == "assistant"
    ]


async def test_interrupt_before_any_audio_played_deletes_the_item(call: Call) -> None:
    server = call.server
    server.script.policy = scripted_model([LONG_ANSWER])
    session, adapter, controller = await call.start(INBOUND)
    call.speaker.frozen = True
    call.speaker.pause()  # audio arrives but nothing plays

    handle = session.generate_reply(user_input="When are you open?")
    while not call.speaker.segments or call.speaker.segments[0].pushed < 0.2:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(session.interrupt(), 5)
    await asyncio.wait_for(handle, 5)

    message_id = server.responses[0].message_item_id
    delete = await server.wait_for_event("conversation.item.delete", timeout=5)
    assert delete.payload["item_id"] == message_id
    assert not server.events_of_type("conversation.item.truncate")
    assert call.speech_ended(handle.id).played_seconds == 0
    await server.wait_for_event("conversation.item.deleted", direction="sent")
    assert server.conversation_summary() == [("user", "When are you open?")]
    assert _texts(session, "assistant") == []
    assert session.current_agent.chat_ctx.get_by_id(message_id) is None


# -------------------------------------------------------------------- (c) tool cap


async def _ask_the_weather_at_a_cap_of_two(
    call: Call, *, server_replies_to_tools: bool, auto_tool_reply_generation: bool = False
) -> tuple[AgentSession, TurnController, PlayoutSegment]:
    """A model that calls ``get_weather`` every time it may, asked once under a cap of two
    tool steps; returns when the first (and only) reply has played."""
    call.server.script = RealtimeScript(
        always_call_tool="get_weather",
        tool_arguments={"city": "Oslo"},
        auto_tool_reply=server_replies_to_tools,
        default_text="It is sunny in Oslo.",
    )
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=2)
    session, _, controller = await call.start(
        policy, auto_tool_reply_generation=auto_tool_reply_generation
    )
    session.generate_reply(user_input="What's the weather in Oslo?")
    final = await call.segment_playing(0)
    await wait_finished(final)
    return session, controller, final


@pytest.mark.parametrize(
    ("server_replies_to_tools", "auto_tool_reply_generation"),
    [
        pytest.param(False, False, id="plugin-replies"),
        pytest.param(
            True,
            False,
            id="server-also-replies",
            marks=pytest.mark.fidelity(tool_replying_model(RealtimeTestServer.default_fidelity)),
        ),
        pytest.param(True, True, id="server-replies"),
    ],
)
async def test_tool_cap_then_spoken_reply(
    call: Call, server_replies_to_tools: bool, auto_tool_reply_generation: bool
) -> None:
    server = call.server
    session, controller, final = await _ask_the_weather_at_a_cap_of_two(
        call,
        server_replies_to_tools=server_replies_to_tools,
        auto_tool_reply_generation=auto_tool_reply_generation,
    )
    await asyncio.sleep(0.5)  # nothing else follows

    assert call.agent.cities == ["Oslo", "Oslo"]  # exactly max_tool_steps rounds
    assert not final.interrupted
    assert final.played == pytest.approx(len("It is sunny in Oslo.") / CPS, abs=0.2)
    assert len(call.speaker.segments) == 1
    assert _texts(session, "assistant") == ["It is sunny in Oslo."]
    spoken = [r for r in server.responses if r.reply.text]
    assert [(r.status, r.request.tool_choice) for r in spoken] == [("completed", "none")]
    # every call the server holds was run and answered; nothing unplayed is left
    assert [kind for kind, _ in server.conversation_summary()] == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "assistant",
    ]
    assert controller.context.tool_rounds == 2
    # how the cap held: see realtime.py's table
    expected = {
        # LiveKit asks for each step, then turnfsm for the final reply without tools
        "plugin-replies": ["response.create", "response.create", "response.create"],
        # the server's duplicate reply to the first output is cancelled (its call deleted);
        # at the cap its own reply, under tool_choice "none", is the final reply
        "server-also-replies": [
            "response.create",
            "tool_output",
            "response.create",
            "tool_output",
        ],
        # the server's own replies are the continuation; the last one is tool-free
        "server-replies": ["response.create", "tool_output", "tool_output"],
    }
    variant = {(False, False): "plugin-replies", (True, False): "server-also-replies"}.get(
        (server_replies_to_tools, auto_tool_reply_generation), "server-replies"
    )
    assert [r.trigger for r in server.responses] == expected[variant]
    assert server.responses[-1].request.tool_choice == "none"
    deletes = server.events_of_type("conversation.item.delete")
    assert len(deletes) == (1 if variant == "server-also-replies" else 0)
    # "none" reached the server before the last tool output, and was restored afterwards
    first_create = _position(server, server.events_of_type("response.create")[0])
    choices = [
        (_position(server, e), e.payload["session"]["tool_choice"])
        for e in server.events_of_type("session.update")
        if _position(server, e) > first_create and "tool_choice" in e.payload["session"]
    ]
    outputs = [
        _position(server, e)
        for e in server.events_of_type("conversation.item.create")
        if e.payload["item"]["type"] == "function_call_output"
    ]
    assert [choice for _, choice in choices] == ["none", "auto"]
    assert len(outputs) == 2
    assert outputs[0] < choices[0][0] < outputs[1]
    assert server.session["tool_choice"] == "auto"


# ------------------------------------------------------- (d) every exit path restores


async def _hello_then_greeting(call: Call) -> tuple[AgentSession, TurnAdapter]:
    call.server.script.policy = scripted_model(["Auto reply nobody should hear."])
    policy = TurnPolicy(direction="outbound", greeting=GREETING)
    session, adapter, controller = await call.start(policy)
    adapter.dispatch(ev.CallAnswered(at=adapter.now()))
    call.microphone.speak(0.6)
    greeting = await call.segment_playing(0)
    await call.played(greeting, 0.8)
    call.microphone.speak(2.0)  # talking over the greeting: held by the gate
    await call.played(greeting, 1.2)
    assert controller.state == "greeting"
    assert adapter.gate is not None
    assert adapter.gate.muted
    assert adapter.gate.held_seconds > 0.2
    return session, adapter


@pytest.mark.parametrize("exit_path", ["hang_up", "error"])
async def test_exit_during_the_lock_restores_input_and_leaves_no_task(
    exit_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = asyncio.all_tasks()
    async with served_call() as call:
        server = call.server
        session, adapter = await _hello_then_greeting(call)
        closed = asyncio.Event()
        session.on("close", lambda _: closed.set())
        gate = adapter.gate
        assert gate is not None
        exited_at = len(server.events)  # the events the server handled before the exit
        if exit_path == "hang_up":  # what the SIP watcher reports
            adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="hangup"))
        else:
            assert call.model is not None
            error = llm.RealtimeModelError(
                timestamp=time.time(),
                label="test",
                error=RuntimeError("boom"),
                recoverable=False,
            )
            session.emit("error", ErrorEvent(error=error, source=call.model))
        await asyncio.wait_for(closed.wait(), 5)

        assert call.controller is not None
        assert call.controller.is_ended
        assert not gate.muted
        assert gate.held_seconds == 0
        assert adapter.realtime is not None
        assert adapter.port.timers == {}
        assert adapter.dispatcher._tasks == set()
        # server turn detection (paused for the lock) and tool choice are as they were
        assert server.turn_detection is not None
        assert server.turn_detection["type"] == "semantic_vad"
        assert server.session["tool_choice"] == "auto"
        # the greeting was cancelled by the hang-up only, never during the lock
        (greeted,) = [
            r for r in server.responses if say_exactly(GREETING) in (r.request.instructions or "")
        ]
        in_the_lock = _received_while_active(server, greeted.id, "response.cancel")
        assert not [c for c in in_the_lock if _position(server, c) < exited_at]
    await asyncio.sleep(0.1)
    left = {task for task in asyncio.all_tasks() - before if not task.done()}
    assert left == set()


# ------------------------------------------------------------------------- the example


def _load_example() -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / "realtime_agent.py"
    spec = importlib.util.spec_from_file_location("turnfsm_example_realtime_agent", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_realtime_agent_example_builds_offline() -> None:
    example = _load_example()
    assert example.server._entrypoint_fnc is example.realtime_agent  # @server.rtc_session
    assert example.server._agent_name == example.AGENT_NAME
    policy = example.build_policy()
    assert (policy.direction, policy.greeting, policy.max_tool_steps) == (
        "outbound",
        example.GREETING,
        3,
    )
    controller = TurnController(example.build_policy())
    assert controller.state == "ringing"
    session = example.build_session(api_key="dummy", base_url="http://127.0.0.1:9/v1")
    adapter = attach(session, controller)
    try:
        assert isinstance(session.llm, openai.realtime.RealtimeModel)
        caps = session.llm.capabilities
        assert caps.turn_detection  # the model's default server-side turn detection
        assert caps.can_disable_turn_detection
        assert adapter.realtime is not None
        assert adapter.realtime_levers is not None
        assert adapter.levers[fx.StartGreeting] == adapter.realtime_levers.levers[fx.StartGreeting]
        agent = example.Caller()
        assert isinstance(agent, TurnAgent)
        assert [tool.id for tool in agent.tools] == ["lookup_order"]
    finally:
        adapter.detach()
        await session.llm.aclose()


# ------------------------------------------------- (e) the real protocol's timing (issue 10)

OPEN_HOURS = "We open at nine and close at six, every day but Sunday, when we open at ten."


async def _greeting_then_barge_in(call: Call) -> None:
    """Outbound: "Hello?", the callee talks on through the server's commit (the lock's
    window) and over the greeting; the overlap is answered whole; then a barge-in."""
    server = call.server
    server.script.push_user_transcript("Hello?")
    # the lock's setting lands after "Hello?" is committed (the VAD race): the model
    # answers it, and that reply is suppressed
    server.script.race_auto_replies = 1
    server.script.policy = scripted_model(
        ["Auto reply nobody should hear.", OPEN_HOURS, "Sure.", "Sure."]
    )
    session, adapter, controller = await call.start(
        TurnPolicy(direction="outbound", greeting=SHORT_GREETING)
    )
    adapter.dispatch(ev.CallAnswered(at=adapter.now()))
    call.microphone.speak(0.6)  # "Hello?"
    await server.wait_for_event("input_audio_buffer.committed", direction="sent", timeout=10)
    call.microphone.speak(1.2)  # talks on before the client hears of the commit
    greeting = await call.segment_playing(0)
    await wait_finished(greeting)
    assert greeting.finished_at is not None
    greeting_ended = greeting.finished_at

    # the greeting played whole, after the model's own reply to "Hello?" was suppressed
    assert not greeting.interrupted
    assert greeting.played == pytest.approx(greeting.pushed, abs=0.01)
    assert greeting.played == pytest.approx(len(SHORT_GREETING) / CPS, abs=0.25)
    greeted = [r for r in server.responses if r.reply.text == SHORT_GREETING]
    assert [(r.trigger, r.status) for r in greeted] == [("response.create", "completed")]
    assert server.responses[0].status == "cancelled"

    # the overlap is answered whole, once, after the greeting: no reply to a fragment
    answer = await call.segment_playing(1)
    answered = [r for r in server.responses if r.status != "cancelled"]
    assert [r.reply.text for r in answered] == [SHORT_GREETING, OPEN_HOURS]
    assert answered[1].trigger == "turn_detected"
    assert answered[1].created_at > greeting_ended - 0.05
    history = _texts(session, "user")
    assert history[0] == "Hello?"  # "Hello?" stays, before the greeting
    assert _texts(session, "assistant")[0] == SHORT_GREETING
    local = [(i.role, i.text_content) for i in session.history.items if i.type == "message"]
    assert local.index(("user", "Hello?")) < local.index(("assistant", SHORT_GREETING))
    remote = server.conversation_summary()
    assert remote.index(("user", "Hello?")) < remote.index(("assistant", SHORT_GREETING))

    # barge-in: the history keeps at most the words whose audio played
    await call.played(answer, 2.0)
    call.microphone.speak(0.5)
    await wait_finished(answer)
    assert answer.interrupted
    await server.wait_for_event("conversation.item.truncated", direction="sent", timeout=10)
    (spoken,) = [
        item.text_content or ""
        for item in session.history.items
        if item.type == "message" and item.role == "assistant" and item.interrupted
    ]
    heard = words_heard(server, OPEN_HOURS, answer.played)
    print(f"barge-in: played {answer.played:.2f} s, heard {len(heard)} words, kept {spoken!r}")
    assert spoken.split() == OPEN_HOURS.split()[: len(spoken.split())]  # a word prefix
    assert len(spoken.split()) <= len(heard), (spoken, heard)
    assert len(spoken.split()) >= len(heard) - 2, (spoken, heard)  # and not much less
    # the server kept the audio that played (a refused truncate was sent again shorter)
    truncated = server.events_of_type("conversation.item.truncated", direction="sent")
    assert truncated[-1].payload["audio_end_ms"] <= answer.played * 1000 + 1
    assert controller.state != "ended"


async def _tool_cap(call: Call, *, auto_tool_reply: bool) -> None:
    server = call.server
    session, controller, final = await _ask_the_weather_at_a_cap_of_two(
        call, server_replies_to_tools=auto_tool_reply
    )
    assert call.agent.cities == ["Oslo", "Oslo"]  # exactly max_tool_steps rounds
    assert controller.context.tool_rounds == 2
    assert not final.interrupted
    assert await _assistant_texts(session, 1) == ["It is sunny in Oslo."]
    spoken = [r for r in server.responses if r.reply.text]
    assert [(r.status, r.request.tool_choice) for r in spoken] == [("completed", "none")]


@pytest.mark.parametrize("fidelity", list(FIDELITY_MATRIX))
async def test_greeting_truncation_and_tool_cap_across_protocol_timing(fidelity: str) -> None:
    """Issue 10's matrix: each cell is the real protocol's rules at one timing (latency
    each way, cancel latency, transcript lead, generation speed)."""
    setting = FIDELITY_MATRIX[fidelity]
    async with served_call(setting) as call:
        await _greeting_then_barge_in(call)
    for auto_tool_reply in (False, True):  # OpenAI's own behaviour, then a model that
        # also answers tool output itself (its reply adopted or suppressed at the cap)
        model = tool_replying_model(setting) if auto_tool_reply else setting
        async with served_call(model) as call:
            await _tool_cap(call, auto_tool_reply=auto_tool_reply)


async def test_a_refused_greeting_create_is_asked_again() -> None:
    """The model refuses the greeting's ``response.create`` once, with the real error and
    no event id: the greeting is asked again and plays whole."""
    async with served_call(FIDELITY_MATRIX["no-latency"]) as call:
        server = call.server
        server.script.refuse_creates = 1
        session, controller, greeting = await greet_after_hello(call)
        assistant = await _assistant_texts(session, 1)
        state = controller.state
    refusals = [
        e.payload["error"]
        for e in server.events_of_type("error", direction="sent")
        if e.payload["error"]["code"] == "conversation_already_has_active_response"
    ]
    assert [r["event_id"] for r in refusals] == [None]
    assert server.script.refuse_creates == 0
    assert not greeting.interrupted
    assert greeting.played == pytest.approx(len(SHORT_GREETING) / CPS, abs=0.25)
    assert assistant == [SHORT_GREETING]
    assert state == "listening"
    assert controller.trace is not None
    outcomes = [s.event for s in controller.trace if isinstance(s.event, ev.EffectOutcome)]
    assert ("start_greeting", "refused") in [(o.effect, o.outcome) for o in outcomes]
    retried = [e for s in controller.trace for e in s.effects if isinstance(e, fx.Say)]
    assert [(e.reason, e.allow_interruptions) for e in retried] == [("greeting", False)]


async def test_the_trace_shows_the_suppressed_reply_and_the_wait_for_response_done() -> None:
    """The realtime link decides nothing: when the model answers "Hello?" although its
    replies were paused (the VAD race), suppressing that reply, and waiting for its
    ``response.done`` and the answer to its ``response.cancel`` before asking for the
    greeting again, are machine steps."""
    setting = FIDELITY_MATRIX["100ms-cancel-150ms"]
    async with served_call(setting) as call:
        call.server.script.race_auto_replies = 1
        _, controller, greeting = await greet_after_hello(call)
    assert controller.trace is not None
    steps = [(s.event, s.before, [e.name for e in s.effects]) for s in controller.trace]
    names = [event.name for event, _, _ in steps]
    assert steps[names.index("realtime_model_linked")][2] == ["pause_model_replies"]
    suppressed = names.index("model_reply_started")
    assert steps[suppressed][1] == "greeting"
    assert "suppress_reply" in steps[suppressed][2]
    (refused,) = [
        i
        for i, (event, _, _) in enumerate(steps)
        if isinstance(event, ev.EffectOutcome)
        and (event.effect, event.outcome) == ("start_greeting", "refused")
    ]
    assert steps[refused][2] == ["start_timer"]  # the wait for response.done
    (timer,) = [e for e in list(controller.trace)[refused].effects if isinstance(e, fx.StartTimer)]
    assert timer.timer == "response_done"
    free = next(i for i in range(refused, len(steps)) if "say" in steps[i][2])
    assert steps[free][2] == ["cancel_timer", "say"]
    assert "model_response_done" in names[refused : free + 1]
    # the suppressed reply's cancel, named, and answered before the greeting is asked again
    sent = [e for e, _, _ in steps[:free] if isinstance(e, ev.ModelCancelSent)]
    answered = [e for e, _, _ in steps[: free + 1] if isinstance(e, ev.ModelCancelAnswered)]
    assert [e.cancel_id for e in sent] == [e.cancel_id for e in answered]
    created = [e for e, _, _ in steps[:suppressed] if isinstance(e, ev.ModelResponseCreated)]
    assert [e.response_id for e in sent] == [created[-1].response_id]
    assert "say" not in [e for _, _, effects in steps[:free] for e in effects]
    assert names.index("agent_speech_created", free) > free
    assert not greeting.interrupted


async def test_a_truncate_past_the_models_audio_is_sent_again_within_it() -> None:
    """The model's item is shorter than the audio it sent (85 ms on the real service;
    1.5 s here, so a barge-in hits it): LiveKit's truncate at the played position is
    refused, and the link cuts the item at the length the model states."""
    setting = replace(FIDELITY_MATRIX["no-latency"], truncate_shortfall_ms=1500)
    async with served_call(setting) as call:
        server = call.server
        server.script.policy = scripted_model([LONG_ANSWER])
        session, adapter, controller = await call.start(INBOUND)
        handle = session.generate_reply(user_input="When are you open?")
        answer = await call.segment_playing(0)
        await call.played(answer, 2.5)
        call.microphone.speak(0.5)
        await asyncio.wait_for(handle, 10)
        truncated = await server.wait_for_event(
            "conversation.item.truncated", direction="sent", timeout=10
        )
        refusals = [
            e
            for e in server.events_of_type("error", direction="sent")
            if "already shorter than" in e.payload["error"]["message"]
        ]
        truncates = server.events_of_type("conversation.item.truncate")
    (refused,) = refusals
    assert [t.payload["audio_end_ms"] for t in truncates][0] > answer.played * 1000 - 100
    item_ms = int(re.search(r"of (\d+)ms", refused.payload["error"]["message"]).group(1))
    assert truncates[-1].payload["audio_end_ms"] == item_ms
    assert truncated.payload["audio_end_ms"] == item_ms
