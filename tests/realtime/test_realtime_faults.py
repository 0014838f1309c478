"""Issue 19: realtime against an unreliable peer. Each finding first as a test that failed
on the code of its day, on the virtual clock, in memory."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

from turnfsm import events as ev
from turnfsm.adapters.sim.realtime import FIDELITY_MATRIX, REAL_PROTOCOL

from support.realtime_calls import (
    SHORT_GREETING,
    greet_after_hello_started,
    served_call,
    wait_finished,
    words_heard,
)

GREETING = "Hi, this is Ada from Acme, calling about the order you placed last week."


async def test_a_greeting_refused_twice_ends_the_call_greeting_failed() -> None:
    """Was: the retry's speech is created before its refusal arrives, so the machine took
    the refused retry for a greeting under way and rested in ``listening``, nothing played,
    no end reason."""
    async with served_call(FIDELITY_MATRIX["no-latency"]) as call:
        call.server.script.refuse_creates = 2
        _, controller = await greet_after_hello_started(call)
        await asyncio.sleep(5.0)
        assert controller.trace is not None
        asked = [
            (s.event.effect, s.event.outcome)
            for s in controller.trace
            if isinstance(s.event, ev.EffectOutcome)
            and s.event.effect in ("start_greeting", "say")
        ]
        assert asked == [("start_greeting", "refused"), ("say", "refused")]
        assert controller.is_ended
        assert controller.context.end_reason == "greeting_failed"
        assert not [s for s in call.speaker.segments if s.played > 0]  # nothing played
        assert call.server.script.refuse_creates == 0


async def test_a_greeting_whose_connection_drops_is_retried_and_cut_to_what_was_heard() -> None:
    """The socket drops 1 s into the greeting (4.8 s long; 2.4 s of it had arrived). The
    plugin reconnects; the greeting's speech ends as if whole, with only what arrived.
    Was: the machine took it for a greeting said, committed an unheard word, kept the
    model busy (the next request waited 5 s) and the new conversation lacked the greeting."""
    async with served_call(FIDELITY_MATRIX["100ms-cancel-150ms"]) as call:
        server = call.server
        session, controller = await greet_after_hello_started(call, GREETING)
        cut = await call.segment_playing(0)
        await call.played(cut, 1.0)
        server.connection.drop()
        await asyncio.sleep(10.0)
        assistant = [
            item.text_content or ""
            for item in session.history.items
            if item.type == "message" and item.role == "assistant"
        ]
        assert len(server.connections) == 2
        heard = words_heard(server, GREETING, cut.played)
        # the cut greeting keeps only words heard to their end
        assert assistant[0].split() == heard[: len(assistant[0].split())]
        # and the greeting is asked for again, locked, and plays whole
        retried = [r for r in server.connections[1].responses if r.reply.text == GREETING]
        assert [r.status for r in retried] == ["completed"]
        assert assistant[1:] == [GREETING]
        assert not controller.is_ended
        # the new connection was told the lock (no reply of its own, nothing cancels the
        # retry) and holds the heard part of the cut greeting, not the words that arrived
        reconnected = server.connections[1]
        lock = reconnected.turn_detection_at(retried[0].created_at)
        assert lock is not None
        assert (lock["create_response"], lock["interrupt_response"]) == (False, False)
        said = [text for role, text in server.conversation_summary() if role == "assistant"]
        assert said == assistant


async def test_a_stray_cancel_does_not_cut_the_greeting() -> None:
    """Server turn detection (200 ms of silence ends a turn), 300 ms each way: the callee
    says "Hello?", pauses 0.3 s, says "uh". The model answers "uh"; turnfsm suppresses that
    reply through LiveKit's interrupt. Was: its ``response.cancel`` named no response,
    landed after the greeting's response started and cut the greeting. Now it names the
    suppressed reply's response, and the model refuses it as no longer active."""
    async with served_call(replace(REAL_PROTOCOL, network_latency_ms=300)) as call:
        server = call.server
        _, controller = await greet_after_hello_started(
            call,
            turn_detection=ServerVad(type="server_vad", silence_duration_ms=200),
        )
        await asyncio.sleep(0.6 + 0.3)
        call.microphone.speak(0.2)  # "uh"
        greeting = await call.segment_playing(0)
        await wait_finished(greeting)
        greeted = [r for r in server.responses if r.reply.text == SHORT_GREETING]
        assert [(r.status, r.status_reason) for r in greeted] == [("completed", None)]
        cancels = server.events_of_type("response.cancel")
        assert cancels
        assert all(c.payload["response_id"] != greeted[0].id for c in cancels)
        assert not greeting.interrupted
        assert greeting.played == pytest.approx(len(SHORT_GREETING) / 15, abs=0.1)
