"""Issue 6.2: LiveKit events duplicated, out of order, or after the session closed.

Each test emits real LiveKit event objects (``livekit.agents.voice.events``) with
``session.emit`` on a running session, exactly as LiveKit's own emitter would, and
checks that nothing raises out of ``emit`` and that the outcome documented in the
adapter's module docstring happens. The calls are inbound with the caller speaking first
and no greeting, so the machine is ``listening`` as soon as the session runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from faultcalls import FaultCall, escaped, fault_call
from livekit.agents import Agent, llm
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import (
    AgentStateChangedEvent,
    CloseEvent,
    CloseReason,
    ConversationItemAddedEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    ToolCallStarted,
    ToolExecutionUpdatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import adapter_for

LISTENING_FIRST = TurnPolicy(direction="inbound", first_speaker="user")
LONG_SAY = "Let me read you the whole list of our opening hours for every day of the week."


@pytest.fixture
async def fc(caplog: pytest.LogCaptureFixture) -> AsyncIterator[FaultCall]:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    async with fault_call(LISTENING_FIRST, agent=Agent(instructions="You are on a call.")) as call:
        await call.wait_state("listening", timeout=5)
        yield call


def created(handle: SpeechHandle, source: str = "say") -> SpeechCreatedEvent:
    return SpeechCreatedEvent(user_initiated=True, source=source, speech_handle=handle)  # type: ignore[arg-type]


def tools_executed(count: int = 1) -> FunctionToolsExecutedEvent:
    calls = [
        llm.FunctionCall(call_id=f"call_{i}", name="lookup", arguments="{}") for i in range(count)
    ]
    outputs = [
        llm.FunctionCallOutput(call_id=f"call_{i}", name="lookup", output="9", is_error=False)
        for i in range(count)
    ]
    return FunctionToolsExecutedEvent(function_calls=calls, function_call_outputs=outputs)


def tool_started() -> ToolExecutionUpdatedEvent:
    call = llm.FunctionCall(call_id="call_0", name="lookup", arguments="{}")
    return ToolExecutionUpdatedEvent(update=ToolCallStarted(function_call=call))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """turnfsm warnings, and any exception that reached LiveKit's emitter (which logs
    ``failed to emit event`` instead of raising, except for a TypeError)."""
    return escaped(caplog.records) + [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("turnfsm") and r.levelno >= logging.WARNING
    ]


def steps_of(fc: FaultCall, name: str, speech_id: str | None = None) -> list[ev.Event]:
    return [
        s.event
        for s in fc.steps
        if s.event.name == name
        and (speech_id is None or getattr(s.event, "speech_id", None) == speech_id)
    ]


async def test_a_speech_done_before_it_was_reported_ends_right_after(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    handle = SpeechHandle.create()
    handle._mark_done()  # the speech ended before its speech_created reached us
    fc.session.emit("speech_created", created(handle))
    assert fc.state == "speaking"
    await asyncio.sleep(0.05)  # LiveKit calls the done callback on the next loop turn
    assert fc.state == "listening"
    assert len(steps_of(fc, "agent_speech_ended", handle.id)) == 1
    assert handle.id not in fc.adapter.speeches
    assert fc.controller.context.active_speeches == frozenset()
    assert warnings(caplog) == []


async def test_an_end_before_the_creation_is_ignored(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    handle = SpeechHandle.create()
    # out of order at the machine: the end of a speech it has never seen
    fc.adapter.dispatch(ev.AgentSpeechEnded(at=fc.adapter.now(), speech_id=handle.id))
    assert fc.steps[-1].before == fc.steps[-1].after == "listening"
    assert fc.steps[-1].effects == ()
    fc.session.emit("speech_created", created(handle))
    assert fc.state == "speaking"  # it is a live speech now; its real end still counts
    handle._mark_done()
    await asyncio.sleep(0.05)
    assert fc.state == "listening"
    assert warnings(caplog) == []


async def test_duplicated_speech_and_message_events_count_once(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    handle = fc.session.say(LONG_SAY)  # a real, interruptible speech
    assert fc.state == "speaking"
    fc.session.emit("speech_created", created(handle))  # duplicate
    assert fc.state == "speaking"
    await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=5)
    await asyncio.sleep(0.5)
    handle.interrupt()
    await handle
    await asyncio.sleep(0.1)
    assert fc.state == "listening"
    message = next(m for m in fc.call.messages("assistant"))
    assert message.interrupted
    for _ in range(2):  # duplicated after the speech ended
        fc.session.emit("conversation_item_added", ConversationItemAddedEvent(item=message))
    await asyncio.sleep(0.05)
    created_steps = [s for s in fc.steps if s.event.name == "agent_speech_created"]
    assert len(created_steps) == 2
    assert created_steps[1].effects == ()
    assert len(steps_of(fc, "agent_speech_ended", handle.id)) == 1
    assert len(fc.effects(fx.DropUnspokenText)) == 1
    assert len(steps_of(fc, "assistant_message_committed")) == 3
    heard = [m.text_content for m in fc.call.messages("assistant")]
    assert len(heard) <= 1
    assert all(LONG_SAY.startswith(text or "") for text in heard)
    assert fc.state == "listening"
    assert warnings(caplog) == []


async def test_duplicated_user_turns_and_start_are_harmless(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    gate = fc.adapter.gate
    steps = len(fc.steps)
    # a second "start": no second gate in the chain, no second call start
    fc.session.emit(
        "agent_state_changed",
        AgentStateChangedEvent(old_state="initializing", new_state="listening"),
    )
    assert fc.adapter.gate is gate
    # the gate (only under a policy that mutes) or the session's own input, unwrapped
    assert fc.session.input.audio is (gate or fc.call.audio_input)
    assert fc.steps[steps:] == []  # the call starts once: the machine is not told again
    # the user stops speaking without having started, then starts twice
    for old, new in (
        ("speaking", "listening"),
        ("listening", "speaking"),
        ("listening", "speaking"),
    ):
        fc.session.emit("user_state_changed", UserStateChangedEvent(old_state=old, new_state=new))
    fc.session.emit(
        "user_input_transcribed", UserInputTranscribedEvent(transcript="Hello?", is_final=True)
    )
    message = llm.ChatMessage(role="user", content=["Hello?"])
    for _ in range(2):  # the same committed turn reported twice
        fc.session.emit("conversation_item_added", ConversationItemAddedEvent(item=message))
    commits = steps_of(fc, "user_turn_committed")
    assert [c.item_id for c in commits] == [message.id, message.id]  # type: ignore[attr-defined]
    assert fc.state == "listening"
    assert warnings(caplog) == []


async def test_a_tool_step_after_the_hang_up_is_ignored(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    fc.adapter.dispatch(ev.CallEnded(at=fc.adapter.now(), reason="hangup"))
    assert fc.state == "ended"  # the session is shutting down; the adapter still listens
    fc.session.emit("tool_execution_updated", tool_started())
    event = tools_executed(count=2)
    fc.session.emit("function_tools_executed", event)
    late = [s for s in fc.steps if s.event.name.startswith("tool_step")]
    assert [s.event.name for s in late] == ["tool_step_started", "tool_step_finished"]
    assert all(s.before == s.after == "ended" and s.effects == () for s in late)
    assert event.has_tool_reply  # nothing was cancelled for an ended call
    await fc.wait_detached()
    steps = len(fc.steps)
    fc.session.emit("tool_execution_updated", tool_started())
    fc.session.emit("function_tools_executed", tools_executed())
    assert len(fc.steps) == steps
    assert warnings(caplog) == []


async def test_events_after_close_are_ignored(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    handle = SpeechHandle.create()
    fc.session.emit("speech_created", created(handle))  # a speech that outlives the session
    await fc.session.aclose()
    assert adapter_for(fc.session) is None
    steps = len(fc.steps)
    assert fc.steps[-1].after == "ended"
    message = llm.ChatMessage(role="assistant", content=["Goodbye."], interrupted=True)
    late_events = {
        "agent_state_changed": AgentStateChangedEvent(
            old_state="initializing", new_state="speaking"
        ),
        "user_state_changed": UserStateChangedEvent(old_state="listening", new_state="speaking"),
        "user_input_transcribed": UserInputTranscribedEvent(transcript="Hi?", is_final=True),
        "conversation_item_added": ConversationItemAddedEvent(item=message),
        "speech_created": created(SpeechHandle.create(), source="generate_reply"),
        "tool_execution_updated": tool_started(),
        "function_tools_executed": tools_executed(),
        "error": ErrorEvent(
            error=llm.LLMError(
                timestamp=0.0, label="x", error=RuntimeError("x"), recoverable=False
            ),
            source=fc.session.llm,
        ),
        "close": CloseEvent(reason=CloseReason.ERROR),
    }
    for name, event in late_events.items():
        fc.session.emit(name, event)  # type: ignore[arg-type]
    handle._mark_done()  # the adapter's own callback fires after it detached
    fc.adapter.timer_expired("idle")  # so does a timer that was already due
    await asyncio.sleep(0.05)
    assert len(fc.steps) == steps
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert "turnfsm: agent_speech_ended after detach ignored" in debug
    assert "turnfsm: idle_timer_expired after detach ignored" in debug
    assert warnings(caplog) == []


async def test_the_check_sees_an_exception_that_reaches_the_emitter(
    fc: FaultCall, caplog: pytest.LogCaptureFixture
) -> None:
    """LiveKit's emitter logs a handler's exception instead of raising it; the tests above
    would see it in ``warnings()``. Shown here with a handler that is not ours."""

    def broken(event: object) -> None:
        raise RuntimeError("a broken handler")

    fc.session.on("user_state_changed", broken)
    try:
        fc.session.emit(
            "user_state_changed", UserStateChangedEvent(old_state="listening", new_state="away")
        )
    finally:
        fc.session.off("user_state_changed", broken)
    assert escaped(caplog.records) == ["failed to emit event user_state_changed"]
