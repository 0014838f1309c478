"""Issue 6.2: fifty concurrent sessions in one process do not talk across.

Fifty real ``AgentSession`` objects run at once on one event loop, each with its own
strict controller and adapter, its own greeting, its own callee lines and its own model
replies. To stay cheap they have no VAD: an :class:`~faultcalls.InjectedSTT` reports the
callee's words and LiveKit's STT turn detection commits them (real
``user_input_transcribed``, ``on_user_turn_completed``, replies, ``speech_created`` and
playout). Afterwards each trace must hold only its own call: its own texts, speech ids
of its own session only, its own greeting; and each session's history only its own lines.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest
from faultcalls import STT_TURN_HANDLING, InjectedSTT, TaskLedger, escaped, outbound, wait_for
from livekit.agents import AgentSession
from livekit.agents.voice.events import SpeechCreatedEvent

from turnfsm import TurnController
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter, TurnAgent, adapter_for, attach
from turnfsm.adapters.sim import PacedAudioOutput, ScriptedLLM, ScriptedTTS

SESSIONS = 50


def greeting(i: int) -> str:
    return f"Hi, this is agent {i}."


def lines(i: int) -> tuple[str, str]:
    return f"Hello, caller {i} here?", f"Caller {i} asks: when do you open?"


def reply(i: int, text: str) -> str:
    return f"Agent {i} answers: {text}"


@dataclass
class Call:
    index: int
    controller: TurnController
    adapter: TurnAdapter
    session: AgentSession
    speech_ids: set[str] = field(default_factory=set)
    history: list[tuple[str, str]] = field(default_factory=list)
    attached_to_own: bool = True


async def one_call(i: int) -> Call:
    stt = InjectedSTT()
    session = AgentSession(
        llm=ScriptedLLM(lambda r: reply(i, r.last_user_text or ""), chars_per_second=400),
        stt=stt,
        tts=ScriptedTTS(chars_per_second=100),
        vad=None,
        aec_warmup_duration=None,
        turn_handling=STT_TURN_HANDLING,  # type: ignore[arg-type]
    )
    output = PacedAudioOutput()
    session.output.audio = output
    controller = TurnController(outbound(greeting=greeting(i)), strict=True, keep_text=True)
    adapter = attach(session, controller)
    call = Call(i, controller, adapter, session)

    def on_speech(event: SpeechCreatedEvent) -> None:
        call.speech_ids.add(event.speech_handle.id)

    session.on("speech_created", on_speech)
    await session.start(TurnAgent(instructions=f"You are agent {i}."), record=False)
    try:
        await asyncio.sleep((i % 7) * 0.02)  # interleave the calls differently
        adapter.dispatch(ev.CallAnswered(at=adapter.now()))
        await wait_for(lambda: stt.ready, timeout=10, what=f"call {i}: stt stream")
        first, second = lines(i)
        stt.speak(first)
        await wait_for(
            lambda: controller.state == "listening", timeout=15, what=f"call {i}: greeted"
        )
        stt.speak(second)
        await wait_for(
            lambda: any(text == reply(i, second) for _, text in history_of(session)),
            timeout=15,
            what=f"call {i}: answered",
        )
        call.attached_to_own = adapter_for(session) is adapter
        adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="hangup"))
        await wait_for(lambda: adapter_for(session) is None, timeout=10, what=f"call {i}: closed")
        call.history = history_of(session)
    finally:
        await session.aclose()
        await output.aclose()
    return call


def history_of(session: AgentSession) -> list[tuple[str, str]]:
    return [
        (item.role, item.text_content or "")
        for item in session.history.items
        if item.type == "message"
    ]


async def test_fifty_concurrent_sessions_keep_to_their_own_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    ledger = TaskLedger()
    ledger.install(asyncio.get_running_loop())
    calls = await asyncio.gather(*(one_call(i) for i in range(SESSIONS)))
    await asyncio.sleep(0.2)

    all_ids = [speech_id for call in calls for speech_id in call.speech_ids]
    assert len(all_ids) == len(set(all_ids)), "speech ids are unique across sessions"
    for call in calls:
        i = call.index
        first, second = lines(i)
        assert call.attached_to_own
        trace = call.controller.trace
        assert trace is not None
        assert trace.steps[-1].after == "ended"
        # its own words only
        said = [
            s.event.text
            for s in trace
            if isinstance(s.event, ev.UserTranscript | ev.UserTurnCommitted)
        ]
        # the first words' final transcript starts the greeting (no commit of them)
        assert said == [first, second, second], (i, said)
        # speech ids from its own session only (an effect's outcome may name no speech)
        speech_ids = {
            s.event.speech_id for s in trace if getattr(s.event, "speech_id", None) is not None
        }
        assert speech_ids, i
        assert speech_ids <= call.speech_ids, (i, speech_ids, call.speech_ids)
        # its own greeting, then its own answer
        agent_said = [
            s.event.text for s in trace if isinstance(s.event, ev.AssistantMessageCommitted)
        ]
        assert agent_said == [greeting(i), reply(i, second)], (i, agent_said)
        # the session's history holds its own lines only
        assert call.history == [
            ("user", first),
            ("assistant", greeting(i)),
            ("user", second),
            ("assistant", reply(i, second)),
        ], (i, call.history)
        assert call.adapter.port.timers == {}
        assert ledger.pending(call.adapter) == []
    assert ledger.pending() == []
    assert escaped(caplog.records) == []
    assert [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("turnfsm")
    ] == []
