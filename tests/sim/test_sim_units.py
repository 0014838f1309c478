"""The sim components on their own, without an AgentSession (fast)."""

from __future__ import annotations

import asyncio

import pytest
from livekit import rtc
from livekit.agents import llm, stt
from livekit.agents.voice.io import PlaybackFinishedEvent, PlaybackStartedEvent

from turnfsm.adapters.sim import (
    LINES,
    PacedAudioOutput,
    ScriptedAudioInput,
    ScriptedLLM,
    ScriptedReply,
    ScriptedSTT,
    ScriptedToolCall,
    ScriptedTTS,
    UserLine,
)
from turnfsm.adapters.sim.speech import SpeechLine, add_lines, get_line

from support.lines import TEST_LINES


def _tone_frames(seconds: float, frame: float = 0.02) -> list[rtc.AudioFrame]:
    samples = round(24000 * frame)
    return [
        rtc.AudioFrame(
            data=b"\x10\x00" * samples,
            sample_rate=24000,
            num_channels=1,
            samples_per_channel=samples,
        )
        for _ in range(round(seconds / frame))
    ]


def _listen(
    output: PacedAudioOutput,
) -> tuple[list[PlaybackStartedEvent], list[PlaybackFinishedEvent]]:
    started: list[PlaybackStartedEvent] = []
    finished: list[PlaybackFinishedEvent] = []
    output.on("playback_started", started.append)
    output.on("playback_finished", finished.append)
    return started, finished


def _chat(text: str) -> llm.ChatContext:
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="user", content=text)
    return ctx


async def test_paced_output_plays_in_real_time_and_pauses() -> None:
    output = PacedAudioOutput()
    started, finished = _listen(output)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for frame in _tone_frames(0.6):
        await output.capture_frame(frame)
    output.flush()
    await asyncio.sleep(0.2)
    output.pause()
    await asyncio.sleep(0.3)
    assert not output.playing
    output.resume()
    event = await output.wait_for_playout()
    elapsed = loop.time() - t0
    await output.aclose()

    assert len(started) == 1
    assert finished == [event]
    assert event.interrupted is False
    assert event.playback_position == pytest.approx(0.6)
    assert 0.85 <= elapsed <= 1.0  # 0.6 s of audio + 0.3 s paused
    (segment,) = output.segments
    assert segment.pauses == 1
    assert segment.played == pytest.approx(segment.pushed)


async def test_paced_output_clear_reports_the_interruption_once() -> None:
    output = PacedAudioOutput()
    started, finished = _listen(output)
    for frame in _tone_frames(1.0):
        await output.capture_frame(frame)
    await asyncio.sleep(0.3)
    output.clear_buffer()
    # frames of the interrupted segment arriving before its flush are discarded
    for frame in _tone_frames(0.2):
        await output.capture_frame(frame)
    output.flush()
    output.clear_buffer()
    event = await output.wait_for_playout()

    assert len(started) == 1
    assert len(finished) == 1
    assert event.interrupted is True
    assert 0.25 <= event.playback_position <= 0.35
    (segment,) = output.segments
    assert segment.interrupted is True
    assert segment.pushed == pytest.approx(1.0)

    # the next segment starts afresh
    for frame in _tone_frames(0.1):
        await output.capture_frame(frame)
    output.flush()
    event = await output.wait_for_playout()
    await output.aclose()
    assert event.interrupted is False
    assert len(output.segments) == 2
    assert len(started) == 2


async def test_scripted_input_paces_frames_and_drops_them_while_detached() -> None:
    line = LINES["hello"]
    audio_input = ScriptedAudioInput([UserLine(0.1, "hello")], frame_duration=0.01)
    loop = asyncio.get_running_loop()
    received = 0
    t0 = loop.time()
    async for _ in audio_input:
        received += 1
        if received == 20:  # 0.2 s: 0.1 s into the line
            audio_input.on_detached()
            await asyncio.sleep(0.2)
            audio_input.on_attached()
        if audio_input.elapsed() >= 0.7:
            audio_input.close()
    elapsed = loop.time() - t0

    (utterance,) = audio_input.ledger.utterances_of("hello")
    assert 0.69 <= elapsed <= 0.8
    assert received == pytest.approx(50, abs=1)  # 70 frames produced, 20 dropped
    assert utterance.delivered_seconds + utterance.dropped_seconds == pytest.approx(line.duration)
    assert utterance.dropped_seconds == pytest.approx(0.2, abs=0.011)


async def test_scripted_llm_streams_slowly_and_records_requests() -> None:
    text = "We open at nine in the morning."
    model = ScriptedLLM([text], chars_per_second=100, time_to_first_token=0.0)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    chunks = [chunk async for chunk in model.chat(chat_ctx=_chat("When?"))]
    elapsed = loop.time() - t0

    assert "".join(c.delta.content or "" for c in chunks if c.delta) == text
    assert len(chunks) == len(text.split())
    assert elapsed >= len(text) / 100 - 0.02
    (request,) = model.requests
    assert request.last_user_text == "When?"
    assert request.tool_choice is None
    assert request.finished_at is not None


async def test_scripted_llm_parallel_tool_calls_and_tool_choice() -> None:
    calls = (ScriptedToolCall("lookup", {"day": "monday"}), ScriptedToolCall("book"))
    model = ScriptedLLM(
        [ScriptedReply(tool_calls=calls), ScriptedReply(text="Done.", tool_calls=calls)],
        time_to_first_token=0.0,
    )
    first = await model.chat(chat_ctx=_chat("Book it"), tool_choice="auto").collect()
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("lookup", '{"day": "monday"}'),
        ("book", "{}"),
    ]
    second = await model.chat(chat_ctx=_chat("Book it"), tool_choice="none").collect()
    assert (second.text, second.tool_calls) == ("Done.", [])

    stubborn = ScriptedLLM(always_call_tool="lookup", ignore_tool_choice=True)
    ignored = await stubborn.chat(chat_ctx=_chat("Hi"), tool_choice="none").collect()
    assert [c.name for c in ignored.tool_calls] == ["lookup"]
    obedient = ScriptedLLM(["Fine."], always_call_tool="lookup", time_to_first_token=0.0)
    called = await obedient.chat(chat_ctx=_chat("Hi")).collect()
    answered = await obedient.chat(chat_ctx=_chat("Hi"), tool_choice="none").collect()
    assert [c.name for c in called.tool_calls] == ["lookup"]
    assert (answered.text, answered.tool_calls) == ("Fine.", [])
    assert [r.tool_choice for r in obedient.requests] == [None, "none"]


async def test_scripted_tts_audio_is_proportional_and_audible() -> None:
    model = ScriptedTTS(chars_per_second=20)
    text = "Hello, this is the clinic."
    frames = [audio.frame async for audio in model.synthesize(text)]
    duration = sum(f.duration for f in frames)
    samples = b"".join(bytes(f.data) for f in frames)

    assert duration == pytest.approx(len(text) / 20, abs=0.03)
    assert max(samples) > 0
    assert model.texts == [text]


async def test_scripted_stt_events_for_a_heard_line() -> None:
    audio_input = ScriptedAudioInput([UserLine(0.05, "hello")])
    model = ScriptedSTT(audio_input.ledger, final_lag=0.1, interim_results=True)
    stream = model.stream()

    async def feed() -> None:
        async for frame in audio_input:
            stream.push_frame(frame)
            if audio_input.elapsed() >= 0.05 + LINES["hello"].duration + 0.3:
                audio_input.close()
        stream.end_input()

    feeder = asyncio.create_task(feed())
    events = [(ev.type, ev.alternatives[0].text if ev.alternatives else "") async for ev in stream]
    await feeder

    start, end = stt.SpeechEventType.START_OF_SPEECH, stt.SpeechEventType.END_OF_SPEECH
    interim, final = stt.SpeechEventType.INTERIM_TRANSCRIPT, stt.SpeechEventType.FINAL_TRANSCRIPT
    assert events == [(start, ""), (interim, "Hello?"), (final, "Hello?"), (end, "")]
    assert [t.text for t in model.transcripts] == ["Hello?"]


def test_added_lines_play_by_name_and_a_taken_name_is_refused() -> None:
    who = get_line("who_is_this")  # added by tests/conftest.py, recorded under tests/
    assert who in TEST_LINES
    assert who.path.exists()
    assert "tests" in who.path.parts
    add_lines(who)  # the same line again changes nothing
    with pytest.raises(ValueError, match="speech line 'hello' is already"):
        add_lines(SpeechLine("hello", "Goodbye."))
    assert get_line("hello").text == "Hello?"
